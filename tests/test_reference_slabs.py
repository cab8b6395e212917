"""The reference's memory savers give the very values of the whole-tensor forms: quantize and
requantize a slab at a time, a weight's per-channel absmax without moving it to rows, and
the identical-weights check that hashes only weights whose samples agree."""

import numpy as np
import pytest
import torch

from dse.frontend.quantize import _absmax, _absmax_along
from dse.frontend.rewrite import Rewriter
from dse.workload.graph import Graph
from dse.workload.interpret import _saturate_int8, _scaled, _to_int8


def test_quantize_in_slabs_hand_computed():
    # scale 2: 0.25 * 2 = 0.5 rounds to 0 (half to even), 0.75 * 2 = 1.5 to 2, 100 * 2 clamps to 127
    x = torch.tensor([[0.25, -0.75, 100.0], [0.75, -1.25, -100.0]])
    whole = _to_int8(x, {"scale": 2.0})
    slabs = _to_int8(x, {"scale": 2.0}, slab=3)  # one row a slab
    expected = torch.tensor([[0, -2, 127], [2, -2, -128]], dtype=torch.int8)
    assert torch.equal(whole, expected) and torch.equal(slabs, expected)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "int32"])
@pytest.mark.parametrize("attrs", [{"scale": 0.37},
                                   {"scale": [[0.05, 0.1, 0.2]] * 4, "scale_axes": [1, 2], "scale_groups": [1, 16]}])
def test_quantize_slabs_equal_the_whole_tensor(layout, attrs):
    x = torch.randn(1, 4, 48, 40, generator=torch.Generator().manual_seed(0)) * 300
    value = {"contiguous": x, "transposed": x.transpose(2, 3)[..., :48, :40].contiguous().transpose(2, 3),
             "strided": x[:, :, :, ::1][:, :, :48], "int32": (x * 1000).to(torch.int32)}[layout]
    whole = _saturate_int8(_scaled(value, attrs))
    for slab in (1, 500, 2000, value.numel()):
        got = _to_int8(value, attrs, slab=slab)
        assert torch.equal(got, whole) and got.stride() == whole.stride()


def test_absmax_along_an_axis_equals_the_rows_form():
    w = np.array([[1.0, -5.0], [-3.0, 2.0], [0.5, 0.0]], dtype=np.float32)
    assert _absmax_along(w, 1).tolist() == [3.0, 5.0]
    assert _absmax_along(w, 0).tolist() == [5.0, 3.0, 0.5]
    v = np.random.default_rng(1).standard_normal((3, 5, 7)).astype(np.float32)
    for axis in range(3):
        assert np.array_equal(_absmax_along(v, axis), _absmax(np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1)))


def test_identical_weights_sampled_then_hashed():
    """Copies are bound wherever the sample falls; arrays whose samples agree but whose bytes
    differ elsewhere stay apart (the sample only picks which are hashed whole)."""
    rw = Rewriter(Graph("g", [], {}, [], [], {}), "test")
    same_a = rw.weight("a", np.ones((1, 8), dtype=np.float32))
    same_b = rw.weight("b", np.ones((1, 8), dtype=np.float32))
    other = np.ones((1, 8), dtype=np.float32)
    other[0, 7] = 2.0
    c = rw.weight("c", other)
    big_a = np.zeros(3 * 4096 + 1, dtype=np.float32)
    big_b = big_a.copy()
    big_b[1] = 1.0  # sampled every 3rd element: index 1 is not, so the samples agree
    d, e, f = rw.weight("d", big_a), rw.weight("e", big_b), rw.weight("f", big_a.copy())
    assert rw._identical_weights({same_a, same_b, c, d, e, f}) == {same_b: same_a, f: d}
