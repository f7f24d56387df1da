"""``build_report``: read every record under a results folder (or one file) and write
``report.md`` and ``report.html``. Sections appear only when their data exists; what is
missing is listed at the end, so a single run, failed runs or CPU-only results still give a
complete, honest report."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from scaleprobe.core import results as res
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, dict_of, dicts
from scaleprobe.report.findings.diagnose import diagnose_experiment, diagnose_run, format_findings
from scaleprobe.report.findings.finding import Finding
from scaleprobe.report.findings.grouped import Group, group_findings
from scaleprobe.report.findings.headline import TITLE as HEADLINE
from scaleprobe.report.findings.headline import headline_section
from scaleprobe.report.reading import records as R
from scaleprobe.report.render import sections_comm as SC
from scaleprobe.report.render import sections_exp as SE
from scaleprobe.report.render import sections_runs as SR
from scaleprobe.report.render.doc import Section, Table, Text, to_html, to_markdown
from scaleprobe.report.render.labels import distinct_labels
from scaleprobe.report.render.whatif import whatif_section

TITLE = "scaleprobe report"
MD_NAME = "report.md"
HTML_NAME = "report.html"


def build_report(src: str | Path, out_dir: str | Path | None = None) -> tuple[Path, Path]:
    """Write report.md and report.html for the records at ``src`` (a results folder,
    results.jsonl or result.json) into ``out_dir`` (default: the folder of ``src``).
    Raises ConfigError when ``src`` is missing or holds no records, OutputError when the
    output folder cannot take the report (read-only, no permission, full)."""
    src_p = Path(src)
    records = R.load_records(src_p)
    base = src_p if src_p.is_dir() else src_p.parent
    out = res.check_writable(Path(out_dir) if out_dir is not None else base)
    intro, sections = compose(records, _bases(base), str(src_p))
    md_path, html_path = out / MD_NAME, out / HTML_NAME
    try:  # each file whole or not at all; a full or read-only folder is one line
        res.write_text_atomic(md_path, to_markdown(TITLE, intro, sections, out))
        res.write_text_atomic(html_path, to_html(TITLE, intro, sections))
    except OSError as e:  # a plot written beside report.md
        raise res.output_error(e.filename or out, e) from None
    return md_path, html_path


def _bases(base: Path) -> list[Path]:
    """Folders that run folders may sit in: the source and every folder holding results."""
    found = [base]
    if base.is_dir():
        found += [p.parent for p in sorted(base.rglob(res.RESULTS_FILE))[:50]]
    return list(dict.fromkeys(found))


def compose(records: list[Record], bases: list[Path],
            source: str = "") -> tuple[list[Any], list[Section]]:
    """The report as a document: intro blocks and the sections that have data, the first
    being "What this says" (the verdicts, report/findings/headline.py).

    Each part is built on its own: a malformed record costs that part (named under "Not in
    these results"), never the whole report."""
    problems: list[str] = []

    def safe(title: str, build: Any, *args: Any) -> Any:
        try:
            return build(*args)
        except Exception as e:  # reported in the document instead of ending the report
            problems.append(f"{title}: {type(e).__name__}: {e}")
            return None

    runs = R.runs(records)
    exp_findings = safe("Findings", diagnose_experiment, records) or []
    groups = safe("Findings", group_findings, _run_findings(runs, safe)) or []
    candidates = [
        safe(HEADLINE, headline_section, records, groups),
        safe("Findings", SR.findings_section, exp_findings, [g.finding for g in groups]),
        safe("Runs", SR.runs_section, runs),
        safe("Sweeps", SE.sweeps_section, records),
        safe("Scaling", SE.scaling_section, records),
        safe("Time to target", SE.target_runs_section, records),
        safe("Step-time breakdown", SR.breakdown_section, runs),
        safe("Utilisation over time", SR.utilisation_section, runs, bases),
        safe("Co-location", SE.colocate_section, records),
        safe("Communication", SC.comm_section, records),
        safe("What if", whatif_section, records),
        safe("Accuracy parity", SE.parity_section, records),
        safe("Top operators", SR.top_ops_section, runs, bases),
        safe("Sources", sources_section, records),
    ]
    sections = [s for s in candidates if s is not None]
    missing = _missing(records, runs, {s.anchor for s in sections}, problems)
    if missing:
        sections.append(missing)
    return _intro(records, runs, source), sections


def lead_section(records: list[Record]) -> Section | None:
    """The report's opening section ("What this says") alone, from what ``compose`` builds
    it from (the findings of each run, grouped), without the other sections' tables and
    figures: what ``compose(...)[1][0]`` is."""
    return headline_section(records, _groups(R.runs(records)))


def findings_text(records: list[Record]) -> str:
    """The report's Findings for the terminal (``report --findings``): the findings across
    runs, then the per-run findings grouped as in the report (one per verdict and next step,
    naming its runs), most severe first."""
    runs = R.runs(records)
    across = diagnose_experiment(records)
    per_run = [g.finding for g in _groups(runs)]
    if not across and not per_run:
        return format_findings([])
    parts = [f"{caption}:\n{format_findings(items)}" for caption, items
             in (("Across runs", across), ("Per run", per_run)) if items]
    return "\n\n".join(parts)


def _groups(runs: list[RunResult]) -> list[Group]:
    """The runs' findings grouped as the report groups them, outside ``compose`` (whose
    ``safe`` turns a part's failure into a line of the document)."""
    return group_findings(_run_findings(runs, lambda _, f, *a: f(*a)))


def _run_findings(runs: list[RunResult], safe: Any) -> list[tuple[RunResult, Finding]]:
    """Each run's findings, about the run as the figures name it: what sets it apart from
    the others (experiment point and repeat), never a name that several runs share."""
    labels = distinct_labels(runs) if runs else []
    return [(r, replace(f, subject=label)) for r, label in zip(runs, labels, strict=True)
            for f in safe("Findings", diagnose_run, r, runs) or []]


def _intro(records: list[Record], runs: list[RunResult], source: str) -> list[Any]:
    kinds = Counter(_kind(r) for r in records)
    statuses = Counter(str(r.status) for r in runs)
    parts = [f"{n} {k} record{'s' if n != 1 else ''}" for k, n in kinds.items() if k != "run"]
    status = ", ".join(f"{n} {RunResult(status=s).status_text}" for s, n in statuses.items())
    head = f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f" ({status})" if status else "")
    lines = [f"Source: {source or 'results'}; generated {res.utc_now()}.",
             "Contents: " + ", ".join([head, *parts]) + "."]
    lines += [f"Environment: {e}" for e in _environments(records)]
    lines += [_shared_text(eid, folders) for eid, folders in R.shared_ids(records).items()]
    return [Text("\n".join(lines))]


def _shared_text(eid: str, folders: list[str]) -> str:
    return (f"Note: experiment id {eid} is in {len(folders)} folders ({', '.join(folders)}); "
            f"each is kept and labelled by its folder, e.g. \"{eid} ({folders[0]})\".")


def _kind(r: Record) -> str:
    return str(getattr(r, "kind", None))


def sources_section(records: list[Record]) -> Section | None:
    """Every folder records were read from: its experiments and how many runs."""
    folders: dict[str, dict[str, Any]] = {}
    for r in records:
        f = folders.setdefault(r.source, {"ids": {}, "runs": 0, "other": 0})
        eid = getattr(r, "exp_id", None)
        if eid is not None:
            f["ids"][f"{eid} ({getattr(r, 'exp_kind', None) or _kind(r)})"] = None
        f["runs" if isinstance(r, RunResult) else "other"] += 1
    rows = [[folder or "(records given directly)", ", ".join(f["ids"]) or "-", str(f["runs"]),
             str(f["other"])] for folder, f in folders.items()]
    s = Section("Sources", anchor="sources")
    s.add(Table(["Folder", "Experiments", "Runs", "Other records"], rows,
                right=[False, False, True, True]))
    shared = R.shared_ids(records)
    if shared:
        s.add(Text("\n".join(_shared_text(eid, fs) for eid, fs in shared.items())))
    return s


def _environments(records: list[Record]) -> list[str]:
    seen: dict[str, None] = {}
    for r in records:
        env = dict_of(getattr(r, "env", None))
        if not env:
            continue
        gpus = [g.get("name") for g in dicts(env.get("gpus"))]
        parts = [str(env.get("host") or "?"), f"{env.get('cores') or '?'} cores",
                 str(env.get("cpu_model") or "CPU n/a"),
                 f"torch {env.get('torch') or 'n/a'}",
                 f"GPU: {', '.join(str(g) for g in gpus)}" if gpus else "no GPU"]
        if env.get("driver"):
            parts.append(f"driver {env['driver']}")
        seen[", ".join(parts)] = None
    envs = list(seen)
    return envs[:3] + ([f"... and {len(envs) - 3} more"] if len(envs) > 3 else [])


def _missing(records: list[Record], runs: list[RunResult], shown: set[str],
             problems: list[str]) -> Section | None:
    lines = [f"- could not be built from these records: {p}" for p in problems]
    hints = {
        "runs": "runs: none in these results (`scaleprobe run`)",
        "sweeps": "batch / loader sweeps (`scaleprobe sweep`)",
        "scaling": "scaling runs (`scaleprobe scale`)",
        "breakdown": "step-time breakdown: no run timed a step",
        "utilisation": "utilisation over time: no run's monitor.csv was found",
        "communication": "communication benchmark (`scaleprobe comm`)",
        "colocation": "co-location (`scaleprobe colocate`)",
    }
    lines += [f"- {text}" for anchor, text in hints.items() if anchor not in shown]
    if runs and not any(r.env.get("gpus") or r.metrics.peak_mem_bytes.device_peak() is not None
                        for r in runs):
        lines.append("- GPU figures (device memory, GPU utilisation, power): no run used a GPU")
    bad = [r for r in runs if r.status in ("oom", "failed", "interrupted")]
    if bad:
        lines.append(f"- figures of {len(bad)} run(s) that did not finish: "
                     + ", ".join(f"{r.label} ({r.status_text})" for r in bad[:6]))
    if not lines:
        return None
    return Section("Not in these results", anchor="missing").add(Text("\n".join(lines)))
