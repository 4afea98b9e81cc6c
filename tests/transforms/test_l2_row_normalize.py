"""L2RowNormalize: both modes, all layouts, T.Compose, no privacy cost."""
import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data

from pyg_private.transforms import L2RowNormalize, l2_row_normalize


@pytest.fixture
def x():
    torch.manual_seed(0)
    x = torch.randn(6, 4) * torch.tensor([[0.1], [0.5], [1.0], [2.0], [3.0], [0.0]])
    return x


def test_normalize_puts_rows_on_the_sphere_and_keeps_zero_rows(x):
    out = l2_row_normalize(x, "normalize")
    norms = out.norm(dim=1)
    torch.testing.assert_close(norms[:5], torch.ones(5))
    assert norms[5] == 0
    # direction is unchanged
    torch.testing.assert_close(out[:5], x[:5] / x[:5].norm(dim=1, keepdim=True))


def test_clip_only_shrinks_rows_outside_the_ball(x):
    out = l2_row_normalize(x, "clip")
    inside = x.norm(dim=1) <= 1
    torch.testing.assert_close(out[inside], x[inside])
    torch.testing.assert_close(out[~inside].norm(dim=1), torch.ones(int((~inside).sum())))
    assert (out.norm(dim=1) <= 1 + 1e-6).all()


@pytest.mark.parametrize("mode", ["normalize", "clip"])
def test_sparse_layouts_match_dense(x, mode):
    dense = l2_row_normalize(x, mode)
    coo = l2_row_normalize(x.to_sparse(), mode)
    csr = l2_row_normalize(x.to_sparse_csr(), mode)
    assert coo.layout == torch.sparse_coo and csr.layout == torch.sparse_csr
    torch.testing.assert_close(coo.to_dense(), dense)
    torch.testing.assert_close(csr.to_dense(), dense)


def test_sparse_tensor_backend(x):
    torch_sparse = pytest.importorskip("torch_sparse")
    out = l2_row_normalize(torch_sparse.SparseTensor.from_dense(x), "normalize")
    torch.testing.assert_close(out.to_dense(), l2_row_normalize(x, "normalize"))


def test_in_compose_with_attrs_and_dtype(x):
    data = Data(x=x.double(), pos=x * 5, edge_index=torch.tensor([[0, 1], [1, 0]]))
    out = T.Compose([L2RowNormalize("clip", attrs=["x", "pos"])])(data)
    assert out.x.dtype == torch.float64
    assert (out.pos.norm(dim=1) <= 1 + 1e-6).all()
    assert repr(L2RowNormalize("clip", attrs=["x", "pos"])) == "L2RowNormalize(mode='clip', attrs=['x', 'pos'])"
    ints = l2_row_normalize(torch.tensor([[3, 4], [0, 0]]))
    torch.testing.assert_close(ints, torch.tensor([[0.6, 0.8], [0.0, 0.0]]))


def test_gpu_if_available(x):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = l2_row_normalize(x.cuda(), "normalize")
    assert out.is_cuda
    torch.testing.assert_close(out.cpu(), l2_row_normalize(x, "normalize"))


def test_bad_input():
    with pytest.raises(ValueError, match="mode"):
        L2RowNormalize("sphere")
    with pytest.raises(ValueError, match="NaN"):
        l2_row_normalize(torch.tensor([[float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="2-D"):
        l2_row_normalize(torch.ones(3))
    with pytest.raises(TypeError):
        l2_row_normalize([[1.0, 2.0]])
