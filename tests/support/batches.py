"""v0 training batches for unit tests: responses right-padded as verl pads them."""

from __future__ import annotations

import torch


def right_padded(rows: list[list[int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(responses, mask)`` of shape ``(len(rows), width)``: each row's ids, then zeros; mask 1 on its ids."""
    responses = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        responses[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return responses, mask
