"""Reward-per-step chart (PNG) of a training run; matplotlib with the Agg backend, imported lazily."""

from __future__ import annotations

from pathlib import Path

from episodes.store import EpisodeStore


def plot_series(
    series: dict[str, list[tuple[int, float]]], path: Path, *, title: str, ylabel: str = "mean reward"
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    for label, points in series.items():
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def plot_run(store: EpisodeStore, run: str, path: Path) -> Path:
    points = [
        (s.step, s.reward_mean) for s in store.runs.training_steps(run, limit=100_000) if s.reward_mean is not None
    ]
    return plot_series({run: points}, path, title=f"rlide training run {run!r}: reward per step")
