"""The layer level's command: ``select``, a runtime per fusion group (or per operator, the seed's setting).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlcompile.cli.common import (
    accuracy_contract,
    add_measure_arguments,
    add_model_arguments,
    add_objective_arguments,
    add_old_name,
    add_precision_arguments,
    agreement_line,
    check_objective,
    load,
    log,
    measure_config,
    serving_line,
    stdout,
    write_json,
)
from rlcompile.errors import RlcompileError
from rlcompile.measure.load import load_words
from rlcompile.names import (
    DEFAULT_RUNTIMES,
    LAYER_SOLVERS,
    RUNTIMES,
    choices,
)


def add_parsers(commands) -> None:
    """The layer level's command: ``select``, a runtime per fusion group (or per operator, the seed's setting)."""
    select = commands.add_parser("select", help="choose the library that runs each layer (layer level, QS-DNN)")
    add_model_arguments(select)
    select.add_argument("--agent", default="qlearning", help=f"the layer agent: {choices(LAYER_SOLVERS)} "
                        "(default qlearning)")  # fmt: skip
    select.add_argument("--episodes", type=int, default=None, help="qlearning / random: episodes (default 20/layer)")
    select.add_argument("--threads", type=int, default=None, help="threads per runtime (default: all cores; "
                        "1 with --per-operator, as the seed)")  # fmt: skip
    select.add_argument("--runtimes", default=None, help=f"comma-separated, from {', '.join(RUNTIMES)} "
                        f"(default {','.join(DEFAULT_RUNTIMES)}; + tvm with --tuning-db)")  # fmt: skip
    add_old_name(select, "--libraries", "--runtimes", "runtimes")
    select.add_argument("--tuning-db", type=Path, default=None, help="a `rlcompile tune` work directory: TVM "
                        "segments use its tuned records")  # fmt: skip
    select.add_argument("--per-operator", action="store_true", help="the seed's setting: a primitive per ONNX "
                        "operator, run layer by layer (writes plan.json)")  # fmt: skip
    select.add_argument("-o", "--output", type=Path, default=None, help="where the plan goes (default MODEL.plan/)")
    select.add_argument("--table-dir", type=Path, default=None, help="where lookup tables are kept (default: next "
                        "to the model file; the cache for zoo and packaged models)")  # fmt: skip
    select.add_argument("--budget", default=None, help="wall time, e.g. 90s or 5m: the profile stops adding "
                        "runtimes in time for the final contest to end by it (default: profile every group fully)")
    add_precision_arguments(select)
    add_objective_arguments(select)
    add_measure_arguments(select)
    select.set_defaults(handler=command_select)


def command_select(args: argparse.Namespace) -> int:
    """Choose a library per fusion group (or a primitive per operator with --per-operator), run and time it."""
    from rlcompile import runtimes
    from rlcompile.layer import solvers

    options = {"episodes": args.episodes} if args.episodes and args.agent in ("qlearning", "random") else {}
    if args.episodes is not None and args.episodes < 1:
        raise RlcompileError("empty budget: --episodes must be positive")
    if args.threads is not None and args.threads < 1:
        raise RlcompileError("--threads must be positive")
    solvers.create(args.agent, **options)
    concurrency = check_objective(args)
    if args.per_operator and args.objective == "throughput":
        raise RlcompileError("--per-operator runs layer by layer from Python: it has no --objective throughput")
    if args.per_operator:
        return select_per_operator(args, options)
    if args.tuning_db is not None and not args.tuning_db.is_dir():
        raise RlcompileError(f"--tuning-db {args.tuning_db} is not a tuning work directory")
    names = runtimes.parse(args.runtimes, args.tuning_db is not None)
    return select_segments_command(args, names, options, concurrency)


def select_segments_command(args: argparse.Namespace, names: list[str], options: dict,
                            concurrency: int | None) -> int:  # fmt: skip
    from rlcompile.machine import host_cores
    from rlcompile.optimize import Budget, parse_duration
    from rlcompile.optimize.serving import SERVING_SHARE
    from rlcompile.plan import save_plan
    from rlcompile.precision.choose import choose_plan
    from rlcompile.report.tables import candidates_table, groups_table

    throughput = args.objective == "throughput"
    end = None if args.budget is None else args.started + Budget(parse_duration(args.budget), ("layer",)).usable_s
    deadline = None if end is None else end - (end - args.started) * (SERVING_SHARE if throughput else 0.0)
    contract = accuracy_contract(args)
    model = load(args)
    threads = args.threads or host_cores()
    selection, _ = choose_plan(model, contract, args.agent, args.seed, threads, names, args.tuning_db,
                               args.table_dir, measure_config(args), log, deadline=deadline,
                               leave_out_idle=args.runtimes is None, **options)  # fmt: skip
    serving = serve_selection(selection, concurrency or threads, end) if throughput else None
    stdout.print(groups_table(selection))
    stdout.print(candidates_table(selection))
    chosen = selection.chosen
    summary = (f"chosen: {', '.join(chosen.labels)}: {chosen.segments} segment(s), measured "
               f"{chosen.measured.median_ms:.3f} ms, table predicted {selection.expected_ms(chosen):.3f} ms; "
               f"{agreement_line(chosen)}")  # fmt: skip
    stdout.print(summary, highlight=False)
    then = selection.table.notes.get("ort_native_ms")
    if then:
        stdout.print(f"machine speed since the table was calibrated: ORT native {then:.3f} -> "
                     f"{selection.natives['ort native'].median_ms:.3f} ms (x{selection.drift:.2f}); "
                     "predictions are compared at today's speed")  # fmt: skip
    if selection.noise is not None:
        noise = 100 * selection.noise
        line = f"timing noise of this run: two identical sessions of one library differ by up to {noise:.1f}%"
        if selection.calibration_noise is not None:
            line += f" ({100 * selection.calibration_noise:.1f}% when the table was calibrated)"
        line += load_words(selection.load, "during the final contest")
        stdout.print(line)
    if serving is not None:
        stdout.print(f"serving: {serving_line(serving)}", highlight=False)
    output = args.output or Path(f"{model.name}.plan")
    save_plan(selection, output, serving)
    stdout.print(f"wrote {output}/ (run it with: rlcompile run {output})", highlight=False)
    write_json(args.json, {**selection.to_dict(), **({"serving": serving} if serving else {})})
    return 0


def serve_selection(selection, concurrency: int, deadline: float | None) -> dict | None:
    """``--objective throughput``: the selection's plans of one segment paired with their runtime's serving
    configurations, the pair that serves the most per second made the chosen plan; its record, or ``None`` when no
    plan can be served that way (the plan is then kept as chosen for latency)."""
    from rlcompile.events import Decision
    from rlcompile.optimize.serving import choose_serving

    choice = choose_serving(selection, concurrency, deadline, log)
    if choice is None:
        log(Decision("serving", "no plan of one segment on ort or openvino to serve: the plan chosen for latency "
                                "is kept, served as measured for latency"))  # fmt: skip
        return None
    selection.chosen = choice.candidate
    return choice.to_json()


def select_per_operator(args: argparse.Namespace, options: dict) -> int:
    """The seed's setting: a primitive per ONNX operator, run layer by layer from Python."""
    from rlcompile.layer.per_operator.api import select, write_plan
    from rlcompile.report.tables import plan_summary, plan_table

    model = load(args)
    output = args.output or Path("plan.json")
    run = select(model, args.agent, args.seed, args.table_dir, measure_config(args), log, args.threads or 1, **options)
    stdout.print(plan_table(run))
    stdout.print(plan_summary(run))
    write_plan(run, output)
    stdout.print(f"wrote {output}")
    write_json(args.json, run.to_dict())
    return 0 if run.agreement.within() else 1
