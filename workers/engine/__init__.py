"""The torch engine: build, sharding (FSDP2, tensor parallel), the train loop, data loading,
compression, communication and memory accounting, checkpointing, weight init, export and
evaluation. It never imports ray (an import contract): the same loop runs in a Ray rank actor,
under torchrun and in one process (`python -m workers.engine.local`).
"""
