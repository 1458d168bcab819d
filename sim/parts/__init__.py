"""The engine's serving features, each a part of its own beside the scheduler's core
(``sim.scheduler``): created only when a run's configuration asks for it, holding its own state,
and reached by the core through a few hooks (docs/architecture.md draws them).

- ``chunked.ChunkedPrefill`` (engine.chunked_prefill): the admission, with prefills cut into chunks;
- ``budget.TokenBudget`` (budget.kind other than full): caps and the bulk prune after prefill;
- ``offload.OffloadDecode`` (sparse.kind other than off): decode from CPU memory, Quest-style;
- ``prefetch.Prefetch`` (engine.prefetch other than off): swap-ins ahead of admission;
- ``sharing.PrefixSharing`` (a trace with shared-prefix hashes, memory.prefix_sharing on);
- ``stream.StreamIntake`` (sessions from a stream, not a list): pulls one session at a time.
"""
