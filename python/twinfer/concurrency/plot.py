"""The members' timelines as a Gantt chart (matplotlib): one row per member,
one bar per run, colour per member, time in ms from the phase's first run;
with kernels, the member's traced kernels in a thin band under its runs.

Uses matplotlib.figure.Figure directly (not pyplot), so it draws headless
(Agg) and from any thread; Jupyter displays the returned Figure.

>>> fig = gantt(profile, "together")
>>> fig.savefig("timeline.png")
"""

from __future__ import annotations


def gantt(profile, phase: str = "together", ax=None, kernels: bool = False):
    from matplotlib.figure import Figure

    if phase not in ("together", "alone"):
        raise ValueError(f"phase must be 'together' or 'alone', not {phase!r}")
    names = [m.name for m in profile.members]
    spans = [s for s in profile.spans if s.phase == phase]
    t0 = min((s.start for s in spans), default=0.0)
    if ax is None:
        fig = Figure(figsize=(9, 1.2 + 0.5 * len(names)), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    colours = [f"C{i % 10}" for i in range(len(names))]
    for row, (name, colour) in enumerate(zip(names, colours)):
        bars = [((s.start - t0) * 1e3, s.duration * 1e3) for s in spans if s.member == name]
        if kernels:  # runs on top, the kernels that ran on the member's stream in a band below
            ax.broken_barh(bars, (row - 0.4, 0.5), facecolors=colour, edgecolor="white", linewidth=0.5, label=name)
            ks = [((k.start - t0) * 1e3, k.duration * 1e3) for k in profile.kernels
                  if k.phase == phase and k.member == name]
            ax.broken_barh(ks, (row + 0.15, 0.25), facecolors=colour, alpha=0.6, linewidth=0)
        else:
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colour, edgecolor="white", linewidth=0.5, label=name)
    ax.set_yticks(range(len(names)), labels=names)
    ax.set_ylim(len(names) - 0.5, -0.5)  # first member on top
    ax.set_xlabel("time (ms)")
    what = "stages, pipelined" if profile.kind == "pipeline" else "members, concurrent"
    if phase == "alone":
        what = "one at a time"
    ax.set_title(f"twinfer {profile.kind}: {what} — overlap {profile.overlap:.2f}x")
    ax.grid(axis="x", alpha=0.3)
    return fig
