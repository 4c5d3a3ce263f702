"""The provenance-tagged store: DuckDB rows (the source of truth) and Chroma vectors (rebuildable).

Public API (the contract the agent, knowledge and lifecycle code rely on):

    Store.open(home: Path | None = None, *, chroma_url: str | None = None) -> Store
        home defaults to $KSCOUT_HOME, else the user's data directory (platform-specific).
        Applies pending migrations. Use as a context manager; `close()` releases the file.

    # environments and problems
    store.record_environment(fp: evaluation.Fingerprint) -> str            (env_id = fp.key())
    store.record_problem(problem: evaluation.ProblemInfo) -> str           (problem_id)

    # runs
    store.create_run(run: RunRecord) -> None
    store.finish_run(run_id, *, status: RunStatus, stop_reason: str, best_candidate_id: str | None) -> None
    store.get_run(run_id) -> RunRecord           (raises StoreError if unknown; accepts a unique prefix)
    store.list_runs(limit=50) -> list[RunRecord]
    store.claim_run(run_id, *, pid, host, process_mark) -> RunOwner   (this process runs it now)
    store.run_owners(run_ids=None) -> dict[str, RunOwner]    (who claimed each run last)

    # candidates and evaluations
    store.add_candidate(c: CandidateRecord) -> bool        (False if (run_id, candidate_id) already there)
    store.get_candidate(candidate_id, run_id=None) -> CandidateRecord   (accepts a unique prefix)
    store.candidates(run_id) -> list[CandidateRecord]      (in insertion order)
    store.add_evaluation(run_id, candidate_id, result: EvalResult, *, kind="search") -> str  (eval_id)
        kind: "search" | "remeasure" | "revalidate"
    store.evaluations(run_id=None, candidate_id=None, kind=None) -> list[tuple[str, str, str, EvalResult]]
        rows of (eval_id, run_id, candidate_id, result), oldest first

    # what the search learned
    store.add_outcome(o: OutcomeRecord) -> None            (embedded into Chroma)
    store.outcomes(op_family=None, arch=None, device_name=None, limit=100) -> list[OutcomeRecord]
    store.record_failure(op_family, arch, stage, error_class, message, candidate_id) -> FailurePattern
        (upsert by signature; count += 1; embedded)
    store.failure_patterns(op_family=None, arch=None, limit=20) -> list[FailurePattern]
    store.record_llm_call(call: LLMCall) -> None
    store.llm_calls(run_id) -> list[LLMCall]

    # documents (knowledge's ingest writes these)
    store.upsert_document(doc: Document, chunks: list[Chunk]) -> str   ("added" | "unchanged" | "replaced")
    store.documents() -> list[Document]
    store.chunks(document_id=None) -> list[Chunk]

    # promotions (append-only)
    store.add_promotion_event(e: PromotionEvent) -> None
    store.promotion_history(op_family=None, arch=None) -> list[PromotionEvent]   (oldest first)

    # vectors
    store.vector_search(collection: str, query: str, k: int, where: dict | None = None)
        -> list[tuple[str, float]]        (DuckDB ids with cosine distance), collection in
        {"chunks", "outcomes", "failures"}
    store.reindex() -> dict[str, int]     rebuild Chroma from DuckDB; counts per collection

Row types live in store.records; evaluation results are evaluation.records types.

Additions beyond the contract above (same conventions):

    Store.open(..., embedder: Embedder | None = None, lock_timeout_s: float = 60.0)
    store.session()                      context manager: hold the lock + one connection for a batch
    store.resolve_run_id(prefix) / store.resolve_candidate_id(prefix) -> str   (StoreError if none/many)
    store.get_environment(env_id) -> Fingerprint;  store.get_problem(problem_id) -> ProblemInfo
    store.get_evaluation(eval_id) -> EvalResult;   store.get_outcome(outcome_id) -> OutcomeRecord
    store.get_document(document_id) -> Document;   store.get_chunks(chunk_ids) -> list[Chunk] (in order)
    store.embed(texts) -> list[list[float]]        unit vectors through the embeddings cache
    store.vector_count(collection) -> int
    store.llm_calls(run_id=None)                   all calls when no run is given
    store.upsert_documents([(doc, chunks), ...], force=False, on_progress=None) -> list[str]
        a batch; statuses also "retagged" (same bytes, new provenance) and "repaired" (vectors owed)
    store.upsert_document(s)(..., cause="ingest")  a stored document's tag changes go to its history
        under `cause` ("ingest" | "retag")
    store.document_history(document_ids=None) -> {document_id: [DocumentChange, ...]}  tag changes
        after the first ingest, oldest first, each with its old and new value
    store.forget_document(document_id) -> int      rows, chunks, history and vectors; the number of chunks
    store.pending_vector_documents() / store.repair_vectors()   rows whose Chroma write never confirmed
        (a crash between the two); Store.open repairs them, `vector_repair_error` says if it could not
    store.embed_query(text) -> list[float] | None;  store.cached_vectors(shas) -> {sha: float32 array}
    store.origins_of(table, ids) -> {id: origin}   where imported rows came from (store/sharing.py)
    store.outcomes_citing(eval_ids) -> list[OutcomeRecord]   outcomes whose evidence shares an eval id
    store.sharing.export_bundle / import_bundle    knowledge bundles (Parquet + a signed manifest with
        hashes and row counts); store.signing.Keyring.of(store): this store's key and the keys it trusts

Orders: list_runs newest first; outcomes newest first; failure_patterns most frequent first;
candidates, evaluations, llm_calls, promotion_history oldest first; documents in ingest order.

Vector metadata (for `where`, Chroma syntax: {"arch": "sm_90"}, {"$and": [...]},
{"devices": {"$contains": "H200"}}, {"speedup": {"$gt": 1.1}}); keys whose value is None or an
empty list are absent:
    chunks:   document_id, kind, vendor, devices (list), all_devices (bool: the document names no
              device), op_families (list), doc_version, builtin, ordinal
    outcomes: op_family, arch, device (= device_name), dtype, status, baseline, problem_id,
              transformation, speedup
    failures: op_family, arch, stage, error_class
Chunks are embedded as "heading > path\ntext"; outcomes by `summary`; failures by
"<error_class> at <stage>: <message_shape>".

Errors: StoreError (unknown id, ambiguous prefix, busy/corrupt/unreadable store file naming its path,
input the store refuses); VectorIndexError (a StoreError) when Chroma fails after the DuckDB row was
committed: the row is kept and `reindex()` restores the vectors.
"""

from store.errors import StoreError, VectorIndexError  # noqa: E402
from store.store import Store  # noqa: E402

__all__ = ["Store", "StoreError", "VectorIndexError"]
