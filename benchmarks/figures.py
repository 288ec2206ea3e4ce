"""Every figure of each benchmark, as one row of docs/benchmarks.md, read from its results file
(`benchmarks/results/<name>.json`); benchmarks/readme.py writes the tables."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

Row = tuple[str, str, str]  # benchmark, command, every figure
NO_GOAL = "none: a reference"


def measured(name: str) -> bool:
    """Whether the benchmark has a results file (else its row says it has not run yet)."""
    return (RESULTS / f"{name}.json").exists()


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return data


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def api_load(r: dict[str, Any]) -> Row:
    parts = []
    for database, levels in r["results"].items():
        at_32 = levels[str(min(r["levels"]))]
        errors = sum(level["ours"]["status_5xx"] for level in levels.values())
        parts.append(
            f"{database}: throughput {at_32['throughput_ratio']:.2f}x and p99 "
            f"{at_32['p99_ratio']:.2f}x the bare app's at concurrency {min(r['levels'])}, "
            f"{errors} server errors at {'/'.join(str(level) for level in r['levels'])}"
        )
    met = r["goals_met"]
    goals = (
        f"goals: 0 5xx {'met' if met['no_5xx'] else 'NOT met'}, throughput >= "
        f"{r['goal']['throughput_ratio_min_at_32']} "
        f"{'met' if met['throughput_ratio_at_32'] else 'NOT met'}, p99 <= "
        f"{r['goal']['p99_ratio_max_at_32']} {'met' if met['p99_ratio_at_32'] else 'NOT met'}"
    )
    load = r["machine"].get("load_average")
    note = f"; machine load average {load[0]:.1f} on {r['machine']['cpus']} cores" if load else ""
    return (
        "API load",
        "`python -m benchmarks.api_load`",
        f"{'; '.join(parts)} ({goals}{note})",
    )


def spot_policy(r: dict[str, Any]) -> Row:
    single = r["single_zone"]["summary"]
    multi = r["multi_zone"]["summary"]["all"]
    s = single["all"]
    cost = s["mean_cost_normalized"]
    worst = s["ours_worst_cell_vs_uniform_progress"]
    cells = (
        "never costlier in a cell"
        if s["ours_never_above_uniform_progress"]
        else f"costlier in some cells, worst +{_pct(worst)}"
    )
    per_setting = ", ".join(
        f"{name} {_pct(-v['ours_vs_uniform_progress'])}"
        for name, v in single.items()
        if name != "all"
    )
    mcost = multi["mean_cost_normalized"]
    misses = s["ours_deadline_misses"] + multi["ours_deadline_misses"]
    standby = _standby(s, multi) if "ours_standby" in s else ""
    starts = r["setting"]["start_ticks_per_trace"]
    return (
        "spot policy",
        "`python -m benchmarks.spot_policy --data ../shared/data`",
        f"availability seen only through launch attempts at production's retry cadence; mean "
        f"cost as a share of on-demand over every availability trace ({starts} start ticks "
        f"each) and three cost settings: "
        f"**ours {cost['ours']:.3f}**, Uniform Progress (NSDI'24) "
        f"{cost['uniform_progress']:.3f}, greedy {cost['greedy']:.3f}, omniscient optimum "
        f"{cost['omniscient']:.3f}; ours {_pct(-s['ours_vs_uniform_progress'])} cheaper than "
        f"Uniform Progress ({per_setting}; goal 8%; {cells}), "
        f"{_pct(s['ours_gap_to_omniscient'])} above the optimum (goal 8%); multi-zone (zones "
        f"of one region): ours {mcost['ours']:.3f}, Uniform Progress "
        f"{mcost['uniform_progress']:.3f}, greedy {mcost['greedy']:.3f}, optimum "
        f"{mcost['omniscient']:.3f}: {_pct(-multi['ours_vs_uniform_progress'])} cheaper than "
        f"Uniform Progress, {_pct(multi['ours_gap_to_omniscient'])} above the optimum (goal "
        f"12%); {misses} deadlines missed{standby}",
    )


def _standby(single: dict[str, Any], multi: dict[str, Any]) -> str:
    """Ours + standby (make-before-break, issue #25), in the same runs."""
    s, m = single["ours_standby"], multi["ours_standby"]
    spread = (single.get("interval") or {}).get("ours_standby_vs_uniform_progress")
    drawn = (
        f"{_pct(-spread[1])} to {_pct(-spread[0])} with the traces drawn again; " if spread else ""
    )
    cells = (
        "never costlier in a cell"
        if s["never_above_uniform_progress"]
        else f"costlier in some cells, worst +{_pct(s['worst_cell_vs_uniform_progress'])}"
    )
    return (
        f"; ours + standby (a spot attempt held beside on-demand, its overlap billed, handed "
        f"over with no step lost): {single['mean_cost_normalized']['ours_standby']:.3f}, "
        f"{_pct(-s['vs_uniform_progress'])} cheaper than Uniform Progress ({drawn}goal 8%; "
        f"{cells}), "
        f"{_pct(-s['vs_greedy'])} cheaper than greedy, {_pct(s['gap_to_omniscient'])} above the "
        f"optimum (goal 8%); multi-zone {multi['mean_cost_normalized']['ours_standby']:.3f}, "
        f"{_pct(m['gap_to_omniscient'])} above the optimum (goal 12%); "
        f"{s['deadline_misses'] + m['deadline_misses']} deadlines missed"
    )


def spot_online_bound(r: dict[str, Any]) -> Row:
    vs_up, gap = r["vs_uniform_progress"], r["gap_to_omniscient"]
    worst = r["worst_cell_vs_uniform_progress"]

    def figures(name: str) -> str:
        cells = (
            "never costlier in a cell"
            if worst[name] <= 0
            else f"costlier in some cells, worst +{_pct(worst[name])}"
        )
        per_setting = ", ".join(
            f"{setting} {_pct(-v[name])}" for setting, v in r["by_setting"].items()
        )
        return (
            f"{_pct(-vs_up[name])} cheaper than Uniform Progress ({per_setting}; {cells}), "
            f"{_pct(gap[name])} above the optimum"
        )

    own = vs_up["bayes_full_observation_per_trace"]
    starts = r.get("starts_per_trace")
    each = f" ({starts} start ticks per trace)" if starts else ""
    flag = f" --starts {starts}" if starts else ""
    cost = r["mean_cost_normalized"]
    handover = "bayes_full_observation_handover"
    ceiling = (
        f"; allowed the handover too (the ceiling of make-before-break), "
        f"{figures(handover)}; ours + standby on the same jobs {cost['ours_standby']:.3f}, "
        f"{_pct(cost['ours_standby'] / cost[handover] - 1.0)} above that ceiling "
        f"({figures('ours_standby')})"
        if handover in cost
        else ""
    )
    return (
        "spot policy, online reference",
        f"`python -m benchmarks.spot.online_bound --data ../shared/data{flag}`",
        f"the Bayes-optimal policy for a model of availability fitted on the traces themselves "
        f"(semi-Markov: how long a run has lasted), on the spot policy's {r['cells']} "
        f"single-zone cells{each}: seeing availability at every tick, "
        f"{figures('bayes_full_observation')}; with the model fitted on each trace alone, "
        f"{_pct(-own)} cheaper than Uniform Progress; seeing availability only through launch "
        f"attempts, as production does (QMDP, a heuristic), "
        f"{figures('bayes_attempts_only')}{ceiling}; {r['deadline_misses']} deadlines missed",
    )


def spot_half_life(r: dict[str, Any]) -> Row:
    hours = r["setting"]["shipped_half_life_hours"]
    shipped = "alike" if hours is None else f"{hours:g} h"

    def figures(summary: dict[str, Any]) -> str:
        return ", ".join(
            f"{'**' if name == shipped else ''}{name} "
            f"{_pct(-v['vs_uniform_progress'])}{'**' if name == shipped else ''}"
            for name, v in summary["ours_standby"].items()
        )

    misses = sum(v["deadline_misses"] for v in r["all"]["ours_standby"].values())
    per_set = "; ".join(
        f"{name.rsplit('/', 1)[-1]}: {figures(v)}" for name, v in r["per_trace_set"].items()
    )
    return (
        "spot policy, evidence by age",
        "`python -m benchmarks.spot.half_life --data ../shared/data`",
        f"ours + standby on the spot policy's {r['all']['cells']} single-zone cells "
        f"({r['setting']['starts_per_trace']} start ticks per trace) with each "
        f"sight of a pool weighing 2^(-age / half-life), cheaper than Uniform Progress by: "
        f"{figures(r['all'])} (alike: the week unweighed; bold: shipped); per trace set, "
        f"{per_set}; {misses} deadlines missed",
    )


def spot_busy(r: dict[str, Any]) -> Row:
    setting, single = r["setting"], r["single_zone"]
    worth, multi = single["worth"], r["multi_zone"]["worth"]
    cold = r["cold_start_single_zone"]["worth"]
    probes = single["variants"]["alone_probe"]

    def change(ratio: float) -> str:
        return f"{'+' if ratio >= 1 else '-'}{100 * abs(ratio - 1):.2f}%"  # they are small

    misses = sum(
        v["deadline_misses"]
        for section in ("single_zone", "multi_zone", "cold_start_single_zone")
        for v in r[section]["variants"].values()
    )
    return (
        "spot policy, busy service",
        "`python -m benchmarks.spot.busy --data ../shared/data`",
        f"what each priced signal is worth to ours + standby, {setting['jobs_per_burst']} jobs "
        f"sharing each trace's pools ({single['jobs']} single-zone jobs, "
        f"{r['multi_zone']['jobs']} multi-zone), cost with the signal against without: other "
        f"jobs' attempts (free: made anyway) {change(worth['other_jobs_attempts']['cost_ratio'])} "
        f"single-zone, {change(multi['other_jobs_attempts']['cost_ratio'])} multi-zone, "
        f"{change(cold['other_jobs_attempts']['cost_ratio'])} from a cold start; a probe "
        f"(capacity asked for and released, a hit billed {setting['probe_billed_seconds']:.0f} s) "
        f"{change(worth['probe_single_job']['cost_ratio'])} for one job, "
        f"{change(worth['probe_busy_service']['cost_ratio'])} in the busy service "
        f"({probes['mean_probes']:.0f} probes a job, {probes['mean_probe_hits']:.1f} found "
        f"capacity); cloud capacity scores not measured (no data); {misses} deadlines missed",
    )


def scheduler_scale(r: dict[str, Any]) -> Row:
    largest = max(r["runs"], key=lambda run: run["jobs"])
    return (
        "scheduler scale",
        "`python -m benchmarks.scheduler_scale`",
        f"`decide` for {largest['jobs']:,} pending jobs with distinct requirements against "
        f"{r['catalog_offers']:,} offers: {largest['cpu_seconds']:.2f} s of CPU "
        f"({largest['seconds']:.2f} s wall); {r['distinct_vs_shared_cpu_ratio']:.2f}x the CPU "
        f"of the same jobs with shared requirements",
    )


def quote_calibration(r: dict[str, Any]) -> Row:
    likely = r["median_abs_error_typical"]
    return (
        "quote calibration",
        "`python -m benchmarks.quote_calibration --data ../shared/data`",
        f"{r['jobs']} jobs replayed on the spot traces"
        f"{' with make-before-break' if r['setting'].get('standby') else ''}, each quoted by a "
        f"service that had watched its pool for the week before: median \\|quote - billed\\| / "
        f"billed of the likely cost (the runs' median weighed by 1 / cost) **{likely:.2f}** "
        f"(goal 0.10{'' if likely <= 0.10 else ', not met'}; "
        f"best figure per pool and size in hindsight {r['median_abs_error_hindsight_floor']:.2f}"
        f"), of the expected cost {r['median_abs_error_quote']:.2f}, of the single-plan cost "
        f"{r['median_abs_error_single_plan_baseline']:.2f}; total quoted / billed "
        f"{r['quoted_over_billed_total']:.2f}; billed above the 90th-percentile hold in "
        f"{_pct(r['billed_over_hold_share'])} of jobs; {r['deadline_misses']} deadlines missed; "
        f"Brier score of P(meet) {r['brier_p_meet']:.3f} with {r['spot_only_jobs']} spot-only "
        f"jobs ({r['spot_only_deadline_misses']} missed)",
    )


def chaos(r: dict[str, Any]) -> Row:
    violations = sum(r["violations"].values())
    kinds = Counter(f["fault"] for f in r["faults"])
    struck = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in sorted(kinds.items()))
    coverage = r.get("coverage", {})
    missing = coverage.get("fault_kinds_missing", [])
    return (
        "chaos",
        "`python -m benchmarks.chaos`",
        f"{r['jobs']} jobs on the stack with the spot market on, {len(r['faults'])} faults "
        f"({struck}; seed {r['config']['seed']}"
        + (f"; never struck: {', '.join(missing)}" if missing else "")
        + f"), {coverage.get('preempted_attempts', 0)} spot preemptions: "
        f"{r['succeeded']} succeeded over {r['attempts']} attempts, "
        f"{violations} violations (lost jobs, duplicate attempts, unbilled seconds, ledger "
        f"{r['ledger']['usage_total_microusd']} = {r['ledger']['sum_of_attempts_microusd']} "
        f"micro-dollars, final weights bitwise equal for {r['weights_checked']} jobs)",
    )


def trainer(r: dict[str, Any]) -> Row:
    return (
        "trainer",
        "`python -m benchmarks.trainer`",
        f"steps per CPU-second vs a hand-written loop {r['overhead_ratio']:.2f}; async checkpoint "
        f"stall {r['stall_ratio']:.3f} of a synchronous save; S3 upload "
        f"{r['upload_ratio']:.2f}x raw boto3",
    )


def recovery(r: dict[str, Any]) -> Row:
    return (
        "recovery",
        "`python -m benchmarks.recovery`",
        f"preemption notice to first resumed training step: {r['notice_to_resumed_s']:.1f} s "
        f"median (detect {r['detect_s']['median']:.1f}, reschedule "
        f"{r['reschedule_s']['median']:.1f}, launch {r['launch_s']['median']:.2f}, restore "
        f"{r['restore_s']['median']:.1f}); steps lost per preemption: "
        f"{r['steps_lost_with_notice']:g} with the SIGTERM checkpoint, "
        f"{r['steps_lost_without_notice']:g} without",
    )


def images(r: dict[str, Any]) -> Row:
    sizes = ", ".join(
        f"{name.split(':')[0].removeprefix('gpujobs-')} {image['size_mib']:,.0f} MiB"
        for name, image in r["images"].items()
        if name.startswith("gpujobs-")
    )
    return ("images", "`scripts/docker-images.sh`", f"uncompressed sizes: {sizes}")


def first_contact(r: dict[str, Any]) -> Row:
    outcome = "SUCCEEDED" if r["succeeded"] else "did NOT succeed"
    uids = "trainers as their own uids" if r["trainer_uids_not_root"] else "trainers as root"
    load = r["machine"]["load_average"][0]
    mode = r["private_folder_mode"].replace("0o", "0")
    who = "as root" if r["as_root"] else "not root"
    return (
        "First contact",
        "`python -m benchmarks.first_contact`",
        f"a clone in a {mode} folder, {who}: `make run` serving in {r['start_s']:.0f} s (the "
        f"first start lays out the trainers' runtime), `{r['spec']}` {outcome} in "
        f"{r['job_s']:.0f} s, {uids} (machine load average {load:.1f} on "
        f"{r['machine']['cpus']} cores)",
    )


def gpu(r: dict[str, Any]) -> Row:
    table = {(run["amp"], run["grad_checkpointing"]): run for run in r["table"]["runs"]}
    off, bf16 = table[("off", False)], table[("bf16", False)]
    curves, speed, resume, service = r["curves"], r["speed"], r["resume"], r["service"]
    best = max((run for run in speed["runs"]), key=lambda run: run["mfu"] or 0)
    weights = ", ".join(
        f"{pair} {'equal' if v.get('bitwise_equal') else 'differ'}"
        for pair, v in service["weights"].items()
    )
    return (
        "GPU",
        "`benchmarks/gpu_e2e.sh`",
        f"{r['device']}: GPT-124M bf16 {bf16['step_ms']:.1f} ms/step vs TF32 {off['step_ms']:.1f}"
        f"; bf16 loss after {curves['steps']} steps {_pct(curves['vs_tf32']['bf16'])} vs TF32 "
        f"(goal within {_pct(curves['goal_bf16_within'])}: "
        f"{'met' if curves['goal_met'] else 'NOT met'}); MFU {_pct(best['mfu'] or 0)} "
        f"{'with' if best['compile'] else 'without'} compile (goal {_pct(speed['goal_mfu'])}: "
        f"{'met' if speed['goal_met'] else 'NOT met'}); deterministic resume bitwise equal: "
        f"{'yes' if resume['deterministic_bitwise_equal'] else 'NO'}; embedded service as root: "
        f"{'every job SUCCEEDED' if service['all_succeeded'] else 'NOT every job succeeded'}, "
        f"spot preempted {service['spot_preemptions']}x, final weights {weights}",
    )


def k8s_recovery(r: dict[str, Any]) -> Row:
    parts, local, resumed = r["parts_median_s"], r["local"], r["notice_to_resumed_s"]
    runs = len(r["runs"]["kubernetes"])
    breakdown = ", ".join(
        f"{name} {parts[key]:.1f}"
        for name, key in (
            ("detect", "detect_s"),
            ("reschedule", "reschedule_s"),
            ("pod start", "start_s"),
            ("restore", "restore_s"),
        )
    )
    without_gap = local["notice_to_resumed_without_spot_wait_s"]["median"]
    return (
        "recovery on Kubernetes",
        "`python -m benchmarks.k8s_recovery`",
        f"the local cluster ({r['setup']['kubernetes']}), a pod evicted through the Eviction API, "
        f"the image present: notice to first resumed step {resumed['median']:.1f} s median, "
        f"{resumed['max']:.1f} s max over {runs} runs ({breakdown}); steps lost at most "
        f"{r['steps_lost_max']:g}; in the same run the local launcher's {without_gap:.1f} s "
        f"without the spot gap ({local['notice_to_resumed_s']['median']:.1f} s with it): "
        f"{r['ratio_to_local_median']:.2f}x",
    )


def cluster_start(r: dict[str, Any]) -> Row:
    cold = r.get("cold_s")
    cold_text = (
        f"cold (nothing cached: every component fetched and built) {cold['seconds'] / 60:.0f} min"
        f" on {cold['measured_on']}"
        if cold
        else "cold not measured yet"
    )
    return (
        "cluster start",
        "`python -m benchmarks.cluster_start [--cold | --cold-record FILE]`",
        f"`scripts/cluster/up.sh` to a Ready node: warm {r['warm_s']['median']:.0f} s median "
        f"({len(r['warm_s']['runs'])} runs); {cold_text} ({r['machine']['cpus']} cores)",
    )


def make_test(r: dict[str, Any]) -> Row:
    def said(run: dict[str, Any] | None) -> str:
        if run is None:
            return "not recorded yet"
        return (
            f"{run['seconds'] / 60:.0f} min ({run['passed']} passed, {run['skipped']} skipped, "
            f"{run['cpus']} cores)"
        )

    return (
        "`make test`",
        "`python -m benchmarks.make_test` (make test clocks itself)",
        f"with the caches warm: {said(r.get('warm'))}; on a fresh machine: {said(r.get('fresh'))}",
    )


ROWS: dict[str, Callable[[dict[str, Any]], Row]] = {
    "api_load": api_load,
    "spot_policy": spot_policy,
    "spot_online_bound": spot_online_bound,
    "spot_half_life": spot_half_life,
    "spot_busy": spot_busy,
    "scheduler_scale": scheduler_scale,
    "quote_calibration": quote_calibration,
    "chaos": chaos,
    "trainer": trainer,
    "recovery": recovery,
    "k8s_recovery": k8s_recovery,
    "cluster_start": cluster_start,
    "make_test": make_test,
    "images": images,
    "first_contact": first_contact,
    "gpu": gpu,
}


NOT_YET = {
    "k8s_recovery": (
        "recovery on Kubernetes",
        "`python -m benchmarks.k8s_recovery`",
        "preemption notice to first resumed step on the local cluster: not yet run",
    ),
    "cluster_start": (
        "cluster start",
        "`python -m benchmarks.cluster_start [--cold | --cold-record FILE]`",
        "the local cluster's start, warm and cold: not yet run",
    ),
    "make_test": (
        "`make test`",
        "`python -m benchmarks.make_test` (make test clocks itself)",
        "make test's own clock: not yet recorded",
    ),
    "gpu": (
        "GPU",
        "`benchmarks/gpu_e2e.sh`",
        "AMP/checkpointing table, TF32/bf16/fp16 loss curves, MFU with compile, exact resume "
        "and the embedded service with spot on one CUDA GPU: not yet run on a GPU (its dry run "
        "is in `make test`)",
    ),
}
