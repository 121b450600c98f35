"""Shared by the benchmarks: PNG plots for docs/img/ (matplotlib, no display)."""
import os


def figure(panels, width, title, height=4.0):
    """A figure of `panels` side by side (a list of axes) with `title`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, panels, figsize=(width, height), dpi=100, squeeze=False)
    fig.suptitle(title)
    return fig, list(axes[0])


def ranged_bars(ax, positions, timings, label=None, width=0.8, horizontal=False):
    """Bars at the medians of `timings` (bench.common.Timing) with whiskers
    from their 10th to their 90th percentile."""
    lengths = [t.median for t in timings]
    whiskers = [[t.median - t.lo for t in timings], [t.hi - t.median for t in timings]]
    if horizontal:
        ax.barh(positions, lengths, width, xerr=whiskers, capsize=3, label=label)
    else:
        ax.bar(positions, lengths, width, yerr=whiskers, capsize=3, label=label)


def save(fig, path):
    import matplotlib.pyplot as plt
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
