#!/usr/bin/env python3
"""Render a window of a `seqsync demo --trace` file as an SVG timeline (stdlib only).

usage: tools/trace-svg.py TRACE.json OUT.svg [--from-seq S] [--batches N] [--title TEXT]
                         [--label stage-seq|stage]

`seqsync graph --run --trace` files (every command has seq 0):
    tools/trace-svg.py TRACE.json OUT.svg --from-seq 0 --batches 1 --label stage --title "..."

One row per stream (device time) and per host thread; one box per copy, kernel or blocking
call, labelled with its stage and seq.
"""
import json
import sys

COLORS = {
    "copy in": "#4e79a7", "f": "#f28e2b", "g": "#e15759", "h": "#76b7b2", "copy out": "#59a14f",
}

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f"]


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    src, out = args[0], args[1]
    opts = dict(zip(args[2::2], args[3::2]))
    first = int(opts.get("--from-seq", 100))
    count = int(opts.get("--batches", 6))
    title = opts.get("--title")
    label = opts.get("--label", "stage-seq")
    trace = json.load(open(src))
    names = {(e["pid"], e["tid"]): e["args"]["name"]
             for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"
             and first <= e["args"]["seq"] < first + count]
    if not spans:
        sys.exit("no spans in that window")
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    lanes = sorted({(e["pid"], e["tid"]) for e in spans})
    width, left, row, top = 1100, 150, 28, 40
    scale = (width - left - 20) / (t1 - t0)
    height = top + row * len(lanes) + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="13">' + (
               f'{title}, {(t1 - t0) / 1000:.2f} ms' if title else
               f'seqsync demo: batches {first}..{first + count - 1}, '
               f'{(t1 - t0) / 1000:.2f} ms (streams on device time, host threads on host time)') + '</text>']
    for i, lane in enumerate(lanes):
        y = top + i * row
        svg.append(f'<text x="10" y="{y + 17}">{names.get(lane, lane)}</text>')
        svg.append(f'<line x1="{left}" x2="{width - 10}" y1="{y + row - 2}" y2="{y + row - 2}" stroke="#ddd"/>')
    for e in spans:
        y = top + lanes.index((e["pid"], e["tid"])) * row
        x = left + (e["ts"] - t0) * scale
        w = max(e["dur"] * scale, 1.0)
        stage = e["args"]["stage"]
        color = COLORS.get(stage) or PALETTE[sum(map(ord, stage)) % len(PALETTE)]
        svg.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row - 8}" fill="{color}" '
                   f'stroke="white" stroke-width="0.5"><title>{e["name"]} ({e["dur"]:.0f} us)</title></rect>')
        if w > 34:
            text = stage if label == "stage" else f'{stage} {e["args"]["seq"]}'
            svg.append(f'<text x="{x + 3:.1f}" y="{y + 17}" fill="white">{text}</text>')
    ms = 0.0
    while ms * 1000 <= t1 - t0:
        x = left + ms * 1000 * scale
        svg.append(f'<text x="{x:.1f}" y="{height - 12}" fill="#666">{ms:.1f} ms</text>')
        ms += 1.0 if (t1 - t0) > 4000 else 0.5
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))


if __name__ == "__main__":
    main()
