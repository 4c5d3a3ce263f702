"""kernelscout: knowledge. Ingest documents, answer questions, build the context a proposer sees.

Public API (everything else is internal):

    knowledge.ingest.ingest_paths(store, paths, IngestOptions(...), on_file=None) -> IngestReport
    knowledge.ingest.ingest_builtin(store, on_file=None) -> IngestReport      the shipped hwdocs
    knowledge.retrieve.ask(store, question, device=None, op=None, k=5) -> AskResult
        loads the shipped hwdocs first when the store has no documents at all
    knowledge.context.build_context(store, problem, device_name, arch, token_budget=2000)
        -> KnowledgeContext with .render() -> str and .seed_hints() -> list[dict]
    knowledge.aliases.parse_query(question) -> QueryFacets   (devices, ops, vendors, dtypes, archs)

CLI (knowledge/cli.py): `kscout ingest`, `ask`, `docs`, `reindex`.
Benchmark: `python -m knowledge.bench quality|scale|all`.
Errors: knowledge.errors (IngestError, FrontMatterError, RetrievalError), all KscoutErrors.
"""
