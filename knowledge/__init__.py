"""kernelscout: knowledge. Ingest documents, answer questions, build the context a proposer sees.

Public API (everything else is internal):

    knowledge.ingest.ingest_paths(store, paths, IngestOptions(...), on_file=None, on_chunks=None) -> IngestReport
        Markdown (YAML/MyST front matter kept as metadata), reStructuredText (docutils), HTML, text, PDF;
        any vendor or device name (normalised); files written in batches; statuses added | replaced |
        unchanged | retagged (same bytes, new tags: no re-embedding) | repaired | failed | skipped
    knowledge.ingest.ingest_builtin(store, on_file=None, on_chunks=None) -> IngestReport   the shipped hwdocs
    knowledge.retrieve.ask(store, question, device=None, op=None, k=5) -> AskResult
        intent (worked | failed | how-to | fact) decides the outcomes and failure patterns shown; hits carry
        excerpt, location (file or URL with anchor), vendor, version, origin (vendor | project | external)
        and, for rows imported from another store, whose they are (not re-measured here); outcomes citing
        one evaluation with other numbers are shown together (`OutcomeHit.conflicts_with`). Loads the
        hwdocs into an empty store.
    knowledge.context.build_context(store, problem, device_name, arch, token_budget=2000)
        -> KnowledgeContext with .render() -> str and .seed_hints() -> list[dict]
    knowledge.aliases.parse_query(question) -> QueryFacets   (devices, ops, vendors, dtypes, archs)
    knowledge.manage.retag(store, ref, RetagChanges(...)) / forget(store, ref)
    knowledge.sharing.export_bundle(store, out, team=None) / import_bundle(store, bundle, trust=False)
        -> ImportReport   signed bundles; import raises store.errors.BundleRefused (UntrustedKey) first
    knowledge.sharing.store_keys(store) / trust_key(store, key_or_bundle, label=None) / untrust_key(store, id)
    knowledge.index.corpus_for(store)   the saved search index `ask` reads (rebuilt when documents change)

CLI (knowledge/cli.py): `kscout ingest`, `ask`, `docs`, `reindex`, `retag`, `forget`,
`kscout knowledge export|import|keys|trust|untrust`.
Benchmark: `python -m knowledge.bench quality|latency|scale|all`.
Errors: knowledge.errors (IngestError, FrontMatterError, RetrievalError), all KscoutErrors.
"""
