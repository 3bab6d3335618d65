"""``report.json`` and a self-contained ``report.html`` (inline CSS, charts as base64 PNGs).

The funnel accounts for every input line: ``input_lines == blank + quarantined + dropped by quality,
dedup, selection and split + kept``. Examples show scrubbed text only, with placeholder counts: showing
"before" text would copy the very PII the run removed into the report.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from infra.layout import LOGS_FILE

_PLACEHOLDER = re.compile(r"<([A-Z_]+)>")


def funnel(
    records: dict[str, Any], dedup: dict[str, Any], select: dict[str, Any], split: dict[str, Any]
) -> dict[str, Any]:
    """Dropped by ``stage:reason`` and kept per split; ``balanced`` says every input line is accounted for."""
    dropped: dict[str, int] = {"parse:blank_line": records["blank_lines"]}
    dropped.update({f"quarantine:{k}": v for k, v in records["quarantined"].items()})
    dropped.update({f"quality:{k}": v for k, v in records["dropped"].items()})
    dropped["dedup:exact"] = dedup["exact_removed"]
    dropped["dedup:near"] = dedup["near_removed"]
    dropped["select:diversity_cap"] = select["candidates"] - select["kept"]
    dropped["split:user_in_test"] = split["user_in_test_dropped"]
    kept = {s: split[s]["sessions"] for s in ("train", "val", "test")}
    accounted = sum(dropped.values()) + sum(kept.values())
    return {
        "input_lines": records["lines"], "dropped": dropped, "kept": kept, "kept_total": sum(kept.values()),
        "kept_fraction_of_input": sum(kept.values()) / records["lines"] if records["lines"] else None,
        "accounted": accounted, "balanced": accounted == records["lines"],
    }


def examples(out_dir: Path, n: int = 8) -> list[dict[str, Any]]:
    """First scrubbed user texts of train (those with placeholders first), with placeholder counts."""
    path = out_dir / "train" / LOGS_FILE
    with_pii: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            s = json.loads(line)
            text = next((t["text"] for t in s["turns"] if t["role"] == "user"), "")
            found = Counter(_PLACEHOLDER.findall(text))
            row = {"session_id": s["session_id"], "scrubbed_text": text[:300], "placeholders": dict(found)}
            (with_pii if found else plain).append(row)
            if len(with_pii) >= n - 2 and len(plain) >= 2:
                break
    return with_pii[: n - 2] + plain[:2]


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def funnel_chart(f: dict[str, Any]) -> str:
    """Horizontal bars: sessions dropped per stage:reason, then kept per split (base64 PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(k, v, "#c0504d") for k, v in f["dropped"].items() if v] + [
        (f"kept:{k}", v, "#4f81bd") for k, v in f["kept"].items()]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1))
    ax.barh([r[0] for r in rows][::-1], [r[1] for r in rows][::-1], color=[r[2] for r in rows][::-1])
    ax.set_xlabel(f"sessions (of {f['input_lines']:,} input lines)")
    ax.set_xscale("symlog")
    for i, r in enumerate(rows[::-1]):
        ax.text(r[1], i, f" {r[1]:,}", va="center", fontsize=8)
    try:
        return _png(fig)
    finally:
        plt.close(fig)


def _table(rows: list[list[Any]], head: list[str]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4f}" if v < 1.5 else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return "—" if v is None else str(v)


def _pii_section(pii: dict[str, Any]) -> str:
    parts = [_table([[k, v] for k, v in pii["placeholders"].items()], ["placeholder", "count in logs"])]
    score = pii.get("score")
    if score:
        rows = [[t, v["key_spans"], v["recall"], v["recall_any_type"], v["detected"], v["precision"]]
                for t, v in score["types"].items()]
        parts.append("<p>Scored against the world's answer key (definitions in data_curation/pii_score.py).</p>")
        parts.append(_table(rows, ["type", "key spans", "recall", "recall (any type)", "detected", "precision"]))
    else:
        parts.append("<p>No answer key (private/pii_key.jsonl) beside the input: not scored.</p>")
    return "".join(parts)


_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:14px}
th{background:#f3f3f3}td{text-align:right}td:first-child{text-align:left}pre{background:#f7f7f7;padding:8px;
overflow-x:auto;font-size:12px}.ex{font-family:monospace;font-size:13px;text-align:left}"""


def write_html(report: dict[str, Any], path: Path) -> None:
    f = report["funnel"]
    sel = report["selection"]
    ex_rows = "".join(
        f"<tr><td>{html.escape(e['session_id'])}</td><td class='ex'>{html.escape(e['scrubbed_text'])}</td>"
        f"<td>{html.escape(json.dumps(e['placeholders']))}</td></tr>" for e in report["examples"])
    body = f"""<h1>Curation report</h1>
<p>{f['input_lines']:,} input lines &rarr; {f['kept_total']:,} sessions kept
({_fmt(f['kept_fraction_of_input'])} of input); every line accounted for: <b>{f['balanced']}</b>.</p>
<h2>Funnel</h2><img alt="funnel" src="data:image/png;base64,{funnel_chart(f)}">
{_table([[k, v] for k, v in f['dropped'].items()] + [[f'kept:{k}', v] for k, v in f['kept'].items()],
        ['stage:reason', 'sessions'])}
<h2>PII</h2>{_pii_section(report['pii'])}
<h2>Deduplication</h2>{_table([[k, v] for k, v in report['dedup'].items()], ['', ''])}
<h2>Selection</h2>{_table([[k, v] for k, v in sel.items() if not isinstance(v, dict)], ['', ''])}
<p>Difficulty sets of kept sessions: {html.escape(json.dumps(sel.get('difficulty', {})))}</p>
<h2>Splits</h2>{_table([[s, v['sessions'], v['users'], v.get('tasks')] for s, v in report['splits'].items()],
                       ['split', 'sessions', 'users', 'tasks'])}
<h2>Examples (scrubbed text only)</h2><table><tr><th>session</th><th>user text</th><th>placeholders</th></tr>
{ex_rows}</table>
<h2>Stages</h2>{_table([[k, v['ran'], v['seconds']] for k, v in report['stages'].items()],
                       ['stage', 'ran this time', 'seconds'])}
<h2>Config</h2><pre>{html.escape(json.dumps(report['config'], indent=1))}</pre>"""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>Curation report</title>"
                   f"<style>{_CSS}</style></head><body>{body}</body></html>\n", encoding="utf-8")
    tmp.replace(path)
