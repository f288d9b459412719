"""The job and what runs it, by concern: `spec` (the job schema, torch-free), `engine` (torch:
the sharded train loop, never ray), `cluster` (the Ray runtime that runs the engine on ranks),
`models` and `datasets`. Inside, imports point `cluster -> engine -> (models | datasets) -> spec`
(docs/architecture.md).
"""
