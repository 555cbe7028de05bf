"""One rank per process under ``torchrun``: the shared start of the multi-GPU self-test and benchmark."""

from __future__ import annotations

import os
import sys

import torch

import seam.runtime  # noqa: F401  (multicast off before NCCL starts)


def init_rank(tp: int, what: str) -> tuple[torch.device, int]:
    """Bind this process to its GPU (``LOCAL_RANK``) and join the NCCL world of ``tp`` ranks.

    NVLink multicast is off: importing seam (``seam.runtime``) set the variables NCCL and
    torch symmetric memory read when the group and the mailboxes are created.

    Returns:
        (this rank's CUDA device, rank).

    Raises:
        SystemExit: no GPU for this local rank, or the world size is not ``tp``.
    """
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.cuda.is_available() or torch.cuda.device_count() <= local_rank:
        raise SystemExit(
            f"{what} needs one CUDA GPU per process (local rank {local_rank}, "
            f"{torch.cuda.device_count()} visible): run it on a multi-GPU machine under torchrun"
        )
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    if dist.get_world_size() != tp:
        world = dist.get_world_size()
        dist.destroy_process_group()
        raise SystemExit(f"--tp {tp} but the world has {world} processes")
    return device, dist.get_rank()


def peer_matrix() -> list[list[bool]]:
    """``can_device_access_peer`` for every ordered pair of visible GPUs (the topology probe)."""
    n = torch.cuda.device_count()
    return [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(n)] for i in range(n)]


def peer_group(device: torch.device, rank: int, what: str):
    """This rank's :class:`seam.comm.DistGroup`, or None when some pair of ranks lacks peer
    access (rank 0 says so, naming ``what`` cannot run; the process group is destroyed)."""
    import torch.distributed as dist

    from seam.comm.group import DistGroup

    group = DistGroup(device=device)
    if group.peer_access:
        return group
    if rank == 0:
        print(f"no peer access between every pair of ranks: {what}", file=sys.stderr)
    dist.destroy_process_group()
    return None
