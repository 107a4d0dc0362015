"""Data parallelism under ``accelerate launch``: split work across processes, gather the pieces back in order.

Outside ``accelerate launch`` (one process) every function here is a no-op, so the
library runs the same code either way:

    accelerate launch --cpu --num_processes 2 -m lmswitch train --positive pos.txt --negative neg.txt --out s.safetensors

Hidden-state caching, the costly part of training, is split by batch across
processes; every process then holds the whole cache and runs the same
deterministic solver, so each ends with the switch one process would train
(equal up to the floating-point differences of a different thread count).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def world() -> tuple[int, int]:
    """``(this process's index, number of processes)``: ``(0, 1)`` unless launched by ``accelerate launch`` (or torchrun)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    from accelerate import PartialState  # sets up the process group from the launcher's environment

    state = PartialState()
    return state.process_index, state.num_processes


def is_main() -> bool:
    """Whether this is the process that writes files and prints (the only one, or the first)."""
    return world()[0] == 0


def mine(items: Sequence[T]) -> list[tuple[int, T]]:
    """This process's share of ``items`` (every ``world``-th, starting at its index), with their positions."""
    rank, size = world()
    return [(i, item) for i, item in enumerate(items) if i % size == rank]


def gather(done: list[tuple[int, T]], total: int) -> list[T]:
    """Every process's ``(position, result)`` pairs from :func:`mine`, gathered to all processes in position order."""
    rank, size = world()
    if size == 1:
        parts = [done]
    else:
        import torch.distributed as dist

        parts = [None] * size
        dist.all_gather_object(parts, done)
    ordered = sorted((pair for part in parts for pair in part), key=lambda pair: pair[0])
    if [i for i, _ in ordered] != list(range(total)):
        raise RuntimeError(f"gathered {len(ordered)} of {total} pieces across {size} processes")
    return [result for _, result in ordered]
