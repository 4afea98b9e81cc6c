"""GCON on Cora: edge-private node classification by objective perturbation.

The protocol of the Cora-ML experiment of Wei et al., "GCON" (arXiv:2407.05034), Fig. 1, on Cora (Planetoid; the paper has no Cora figure): 20 labelled
nodes per class, 500 validation, 1000 test; epsilon in {0.5, 1, 2, 3, 4},
delta = 1/|E| (|E|: undirected edges of the cleaned graph);
10 runs; GCON against MLP, GAP and the non-private GCN in one run. Hyperparameters
(alpha, m, Lambda, encoder width and output, loss, pseudo-labels) are chosen on the
validation split and not charged (see ``gcon_common.py``). Every release uses a seeded
generator: reproducible, and for that reason not private. Needs the Cora files
(``$PYG_PRIVATE_DATA``, see the Data section of the documentation's Getting started).

Any dataset: ``--dataset`` (any name of ``example_data.NAMES`` with node features; see
``gcon_common.py`` for the cleaning and the split of the labelled nodes on other graphs).
``--quick`` runs in under 2 minutes on one thread; ``--smoke`` one tiny configuration.
``--threads`` (default 1) sets torch's CPU threads; ``--out`` (default ``outputs``) gets the CSV
and the PNG, with a ``_quick`` suffix for a quick run.

    python examples/cora_gcon.py [--epsilons 1 4] [--runs 10] [--quick] [--dataset CiteSeer] [--threads 1]
        [--out outputs]
"""
from gcon_common import run_experiment


def main() -> None:
    run_experiment("Cora", __doc__.split("\n")[0])


if __name__ == "__main__":
    main()
