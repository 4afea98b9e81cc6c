"""A canonical int32 CSR input keeps its own index arrays (no int64 copy: 1 GB at ogbn-products
size) through the contractive layer and the APPR propagation, with the same values as int64."""
import warnings

import torch
from torch_geometric.utils import to_undirected

from pyg_private.nn import ContractiveGraphLayer
from pyg_private.utils import appr_propagate
from pyg_private.utils.adjacency import csr_indices, simple_undirected_csr, validated_csr


def _csr(n=400, m=3000, idt=torch.int32):
    gen = torch.Generator().manual_seed(5)
    ei = to_undirected(torch.randint(0, n, (2, m), generator=gen), num_nodes=n)
    ei = ei[:, ei[0] != ei[1]]
    crow, col = csr_indices(ei, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_csr_tensor(crow.to(idt), col.to(idt), torch.ones(col.numel()), (n, n)), ei


def test_index_dtype_none_keeps_the_input_arrays():
    adj, _ = _csr()
    crow, col = simple_undirected_csr(adj, 400, index_dtype=None)
    assert crow.dtype == col.dtype == torch.int32
    assert col.data_ptr() == adj.col_indices().data_ptr() and crow.data_ptr() == adj.crow_indices().data_ptr()
    crow64, col64 = validated_csr(adj, 400)  # the default stays int64
    assert col64.dtype == torch.int64 and torch.equal(col64, col.long())
    # a refused input is refused in both forms
    bad = torch.sparse_csr_tensor(adj.crow_indices(), adj.col_indices(), 2 * torch.ones(col.numel()), (400, 400))
    assert simple_undirected_csr(bad, 400, index_dtype=None) is None


def test_contractive_layer_int32_equals_int64_and_edge_index():
    adj32, ei = _csr()
    adj64, _ = _csr(idt=torch.int64)
    x = torch.randn(400, 8, generator=torch.Generator().manual_seed(0))
    layer = ContractiveGraphLayer(6, 0.9, 0.8, 0.1, min_degree=0, noise_multiplier=0.0, cached=False)
    a, b, c = layer(x, adj32), layer(x, adj64), layer(x, ei)
    assert torch.equal(a, b) and torch.equal(a, c)


def test_appr_int32_equals_int64():
    adj32, ei = _csr()
    adj64, _ = _csr(idt=torch.int64)
    x = torch.randn(400, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    for steps in (3, 10):
        a = appr_propagate(x, adj32, alpha=0.1, steps=steps)
        assert torch.equal(a, appr_propagate(x, adj64, alpha=0.1, steps=steps))
        assert torch.equal(a, appr_propagate(x, ei, alpha=0.1, steps=steps))


def test_noisy_ppr_int32_equals_edge_index_without_noise():
    from pyg_private.nn import NoisyPPRDiffusion
    adj32, ei = _csr()
    seeds = torch.tensor([0, 7, 99])
    layer = NoisyPPRDiffusion(alpha=0.2, num_iterations=8, eta=1e-3, noise_scale=0.0, personalized=True, cached=False)
    a = layer(edge_index=adj32, seed_index=seeds, num_nodes=400)
    assert torch.equal(a, layer(edge_index=ei, seed_index=seeds, num_nodes=400))


def test_gap_int32_equals_edge_index_without_noise():
    from pyg_private.nn import GAPAggregation
    adj32, ei = _csr()
    x = torch.randn(400, 8, generator=torch.Generator().manual_seed(2))
    layer = GAPAggregation(3, noise_multiplier=0.0, cached=False)
    a = layer(x, adj32)
    assert a.shape == (400, 32) and torch.equal(a, layer(x, ei))


def test_cached_release_reused_across_index_dtypes():
    from pyg_private import PrivacyAccountant
    adj32, ei = _csr()
    x = torch.randn(400, 8, generator=torch.Generator().manual_seed(0))
    acct = PrivacyAccountant()
    layer = ContractiveGraphLayer(3, 0.9, min_degree=0, noise_multiplier=2.0, cached=True, accountant=acct)
    a = layer(x, adj32)
    b = layer(x, ei)  # the same graph as int64 arrays: the cached release, no new charge
    assert torch.equal(a, b) and len(acct.events) == 1
    u, v = int(ei[0, 0]), int(ei[1, 0])
    keep = ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))
    layer(x, ei[:, keep])  # one undirected edge fewer: a new release, charged
    assert len(acct.events) == 2
