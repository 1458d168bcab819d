"""vLLM v1's engine semantics (0.33.0), rule for rule: the block pool and prefix cache
(``block_pool``), the scheduler (``scheduler``), a session's block identities (``tokens``) and the
engine loop with its step log (``loop``). Proven step by step against the real scheduler by
``experiments.vllm_check``."""
