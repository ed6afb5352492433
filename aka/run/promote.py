"""A promote decision applied to git: checked against a concurrent run's promotion first, then
written and committed exactly once however a kill interrupts it."""

from __future__ import annotations

from aka.errors import AkaError
from aka.knowledge.measured import kernel_dir_of, knowledge_path, record_run
from aka.records import Decision, RunPromotion
from aka.run import gitops
from aka.run.state import rebuild
from aka.run.store import RunStore
from aka.run.supervisor import promotion_message, promotion_meta
from aka.settings import OptimizeSettings


def still_current(store: RunStore, op, decision: Decision) -> Decision:
    """Another run may have promoted meanwhile: then our comparison was against a stale incumbent."""
    promoted = [r for r in store.attempts() if r.promoted]
    expected = promoted[-1].code_hash if promoted else store.read_run().promoted_at_start
    meta = gitops.read_promoted_meta(op.root, op.name)
    current = meta.code_hash if meta else None
    if current != expected:
        return Decision(promote=False, verdict="rejected",
                        reason=f"the promoted kernel changed during this run (now {current}); re-run against it")
    return decision


def finish_pending_promotion(store: RunStore, settings: OptimizeSettings, op) -> None:
    """Apply the last promote decision of the log unless run.json notes it done (idempotent, resume-safe).

    A kill can land anywhere between the log line and the note: before the files, between files
    and commit, or after the commit. Re-writing the same bytes and committing only what differs
    from HEAD finishes each of those cases exactly once.
    """
    promoted = [r for r in store.attempts() if r.promoted]
    run = store.read_run()
    if not promoted or promoted[-1].n in [p.n for p in run.promotions]:
        return
    rec = promoted[-1]
    source = (store.path / "candidates" / f"{rec.n}.py").read_text()
    st = rebuild(store, run)  # its standing includes this promotion
    meta = promotion_meta(run, rec, (st.incumbent_score, st.incumbent_shapes))
    # with --no-commit this run's earlier promotions are still uncommitted edits: its own, replaceable
    earlier = () if settings.commit else tuple((store.path / "candidates" / f"{r.n}.py").read_text()
                                               for r in promoted[:-1])
    # what the run measured against the incumbent this replaces travels with the promotion commit
    knowledge = knowledge_path(kernel_dir_of(op))
    try:
        record_run(store, op)
    except (AkaError, OSError):  # recorded again when the run ends; the promotion must not wait on it
        pass
    extra = (str(knowledge.relative_to(op.root)),) if knowledge.is_file() and knowledge.is_relative_to(op.root) else ()
    commit = gitops.promote(op.root, op.name, source, meta, promotion_message(run, rec, meta), settings.commit,
                            earlier=earlier, extra=extra)
    store.update_run(promotions=[*run.promotions, RunPromotion(n=rec.n, commit=commit)])
