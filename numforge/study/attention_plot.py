"""A grid of attention heatmaps, layers x heads, labelled with the tokens (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

import numpy as np

from ..atomic import atomic_path


def plot_attention_grid(path, matrices: dict, labels: list[str], title: str) -> None:
    """Draw ``{(layer, head): (T,T) array}`` as a grid of heatmaps to the PNG ``path``, atomically;
    ``labels`` are the tokens as ``shown_token`` writes them (``prompt.shown``).

    Rows are queries, columns keys; NaN entries (the causal mask's upper
    triangle) are left blank. Every panel shares one color scale.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError('drawing needs matplotlib: install with: pip install -e ".[plot]"') from None
    layers = sorted({layer for layer, _ in matrices})
    heads = sorted({head for _, head in matrices})
    T = len(labels)
    finite = np.concatenate([m[np.isfinite(m)] for m in matrices.values()])
    low, high = float(finite.min()), float(finite.max())
    size = max(2.2, 0.32 * T + 1.2)  # inches per panel
    figsize = (size * len(heads), size * len(layers) + 0.6)  # + room for the title and the key labels
    fig, axes = plt.subplots(len(layers), len(heads), figsize=figsize, squeeze=False, layout="constrained")
    image = None
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r][c]
            image = ax.imshow(np.ma.masked_invalid(matrices[layer, head]), cmap="viridis", vmin=low, vmax=high)
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            ax.set_xticks(range(T), labels, rotation=90, fontsize=7)
            ax.set_yticks(range(T), labels, fontsize=7)
            if r == len(layers) - 1:
                ax.set_xlabel("key", fontsize=8)
            if c == 0:
                ax.set_ylabel("query", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.6)
    fig.suptitle(title, fontsize=10)
    with atomic_path(path) as temp:
        fig.savefig(temp, format="png", dpi=100)
    plt.close(fig)
