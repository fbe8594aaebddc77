"""The dense tensor a recording reads in place of a tensor: itself, or a nested tensor's
packed components.

A nested tensor (`torch.nested`, or the one `nn.TransformerEncoder`'s fast path builds
with `torch._nested_tensor_from_mask` from a padded batch when autograd is off) has no
single size: `t.shape`, `t.stride()` and everything built on them raise
("NestedTensorImpl doesn't support sizes"), which made recording such a program fail.
Every place that reads a tensor's shape, layout or values for a record goes through
`recorded_view` instead, so a nested tensor gets one consistent treatment: its shape,
stride, element count, value summary and FLOP/byte operands all describe the same dense
tensor.

That tensor is the components packed one after another, `(n_1 + ... + n_k, *rest)` when
the components share their trailing sizes (the tokens of a padded batch, `(len_i, d)`
each), a flat vector otherwise. Packed rather than padded
(`torch.nested.to_padded_tensor(t, 0)`) because:

- Value matching stays meaningful. The packed rows are exactly the values the program
  computes on; their dense counterpart is the same tokens gathered without padding
  (`x[~mask]`, what an unpadding implementation runs). A padded view would add rows of an
  arbitrary pad value that no dense program computes (a dense encoder fills its pad
  positions with whatever attention over masked keys gives), so its summary would match
  nothing and differ with the pad value chosen.
- The byte counts of the energy model stay true: the packed buffer is what the kernels
  read and write; a padded view would charge the padding the fast path exists to skip.
- It costs nothing for the contiguous nested tensors operators return (a view of the
  buffer), where padding would copy the whole batch per recorded tensor.
"""

from __future__ import annotations

import torch


def recorded_view(t: torch.Tensor) -> torch.Tensor:
    """`t` for a regular tensor; for a nested tensor, its components packed (see module)."""
    if not t.is_nested:
        return t
    if t.layout == torch.jagged:
        # jagged: the values buffer is already (sum of ragged sizes, *rest); a tensor with
        # holes (offsets plus lengths) is packed first so the holes are not read
        return (t if t.is_contiguous() else t.contiguous()).values()
    # strided nested: one flat buffer, components in order after `contiguous()`
    packed = (t if t.is_contiguous() else t.contiguous()).values()
    if packed.numel() != t.numel():  # a view into a larger buffer: gather the components
        packed = torch.cat([c.reshape(-1) for c in t.unbind()])
    sizes = t._nested_tensor_size()
    if sizes.dim() == 2 and sizes.shape[1] >= 1 and sizes.shape[0] > 0:
        rest = sizes[:, 1:]
        if bool((rest == rest[0]).all()):
            return packed.view(-1, *(int(s) for s in rest[0]))
    return packed.reshape(-1)
