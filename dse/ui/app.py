"""The `dse ui` web app: Starlette routes over one record store.

Every page has a stable URL (/experiments/12, /candidates/34, /runs/56, /compare?c=1&c=2);
bad URLs, unknown records and refused forms are error pages with their HTTP status, and
nothing is written by a refused request. All user text goes through Jinja2's autoescaping.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, replace
from functools import partial
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote, urlencode

import jinja2
import numpy as np
import pandas as pd
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.background import BackgroundTask
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..config_tree import changed_paths, is_changed, tree_rows
from ..errors import InputError
from ..records import RecordNotFound, Store
from ..records.blobs import EvidenceError, open_verified
from ..records.reads import flatten
from ..records.outcomes import experiment_status
from ..report.data import (PPA_KINDS, accepted_candidates, front_of, meaningful_candidates, model_vs_emulator,
                           outcome_mark, row_marks, stored_bank_lifetimes)
from ..report.html import fmt_value
from ..report.interactive import (MODEL_VS_EMULATOR_HEIGHT, OP_METRICS, PARALLEL_HEIGHT, PARETO_HEIGHT, PPA_AXES,
                                  SEARCH_HISTORY_HEIGHT, bank_lifetime_figure, bank_lifetime_height, bank_rows,
                                  component_figure, component_height, component_ids, history_figure, history_height,
                                  model_vs_emulator_figure, op_figure, op_height, parallel_figure, pareto_figure,
                                  search_history_figure)
from ..report.search_history import EVALUATOR, SearchHistory, best_words, importance_rows, search_history
from ..runner.acceptance import figures_wanted, headline, judge_experiment
from ..runner.caveats import hardware_caveat, kinds_text
from ..runner.decisions import decide
from ..runner.metrics import METRICS
from . import artifacts, csrf, live, notes, queries
from .guard import Access, Guard
from .memo import Memo
from .params import MAX_ID, BadParameter, decimal, experiment_ref, form_text, id_list, number, record_id
from .queries import BadQuery, CandidateQuery
from .responses import Problem, figure_response
from .table import shown_columns

# How often the page of a running sweep asks for news (ms): a sweep records candidates in
# batches, seconds apart.
LIVE_POLL_MS = 2000
LIVE_WATCH_MAX = 500  # candidates a poll asks the outcome of (those the page shows unfinished)
PLOTLY_JS = Path(str(files("plotly") / "package_data" / "plotly.min.js"))
TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"


def _when(moment) -> str:
    if moment is None or (not isinstance(moment, str) and pd.isna(moment)):
        return "—"
    return pd.Timestamp(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt_value
    env.filters["when"] = _when
    env.filters["json"] = lambda v: json.dumps(v, default=str)
    env.filters["changes"] = queries.changes_text
    env.filters["fromjson"] = lambda v: json.loads(v) if isinstance(v, str) and v else (v or [])
    env.globals["with_params"] = _with_params
    # Notes, decisions' evidence kinds and configs, as `dse show` words and draws them.
    env.globals.update(tree_rows=tree_rows, tree_changed=is_changed, changed_paths=changed_paths,
                       note_choices=notes.NOTE_CHOICES)
    env.filters["kinds"] = kinds_text
    env.filters["caveat"] = hardware_caveat
    env.globals["zip"] = zip
    env.globals["experiment_status"] = experiment_status  # "proposed, not run yet" as `dse history` says it
    env.globals["pct"] = lambda share: "—" if share is None else f"{100 * share:.1f} %"
    return env


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts with missing values as None (pandas' NA has no truth value)."""
    return [{k: (None if not isinstance(v, (list, dict, str)) and pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]


def _with_params(params: dict, **changes) -> str:
    """A query string: `params` with `changes` applied (None removes a parameter)."""
    merged = {**params, **changes}
    return "?" + urlencode({k: v for k, v in merged.items() if v is not None and v != ""})




def candidate_query(params) -> CandidateQuery:
    """The candidate table's query from the URL's parameters (checked against the
    experiment's metrics by `queries.candidate_page`)."""
    order = params.get("order", "asc")
    if order not in ("asc", "desc"):
        raise BadQuery("order", order, "asc or desc")
    return CandidateQuery(sort=params.get("sort", "id"), descending=order == "desc",
                          status=params.get("status", ""), text=params.get("q", "")[:200],
                          metric=params.get("metric", ""), low=decimal(params, "min"),
                          high=decimal(params, "max"), page=number(params, "page", 1),
                          per_page=number(params, "per_page", 50))  # fmt: skip


def _objectives(spec_text: str) -> list[dict]:
    try:
        spec = tomllib.loads(spec_text) if spec_text else {}
    except tomllib.TOMLDecodeError:
        spec = {}
    return spec.get("objectives") or [{"metric": "latency_cycles", "direction": "minimize"}]


class Workbench:
    """The routes' shared state: the store and the templates."""

    def __init__(self, store: Store):
        self.store = store
        self.env = _environment()
        self.memo = Memo(store)  # the experiment-wide figures, once per state of the records

    # ---- helpers ------------------------------------------------------------------------

    def page(self, request: Request, template: str, status: int = 200, **context) -> HTMLResponse:
        context.setdefault("title", "dse")
        body = self.env.get_template(template).render(
            request=request, url_for=lambda name, **params: str(request.app.url_path_for(name, **params)),
            csrf_field=csrf.FIELD, csrf_token=csrf.token(request), store_url=self.store_shown,
            **context)  # fmt: skip
        response = HTMLResponse(body, status_code=status)
        csrf.set_cookie(request, response)
        return response

    @property
    def store_shown(self) -> str:
        return self.store.engine.url.render_as_string(hide_password=True)

    def experiment(self, ref: str) -> dict:
        try:
            exp = self.store.experiment(experiment_ref(ref))
        except RecordNotFound as error:
            raise Problem(404, "No such experiment", str(error)) from None
        return exp

    # ---- pages --------------------------------------------------------------------------

    def experiments(self, request: Request) -> Response:
        summaries = self.store.experiment_summaries()
        timeline = history_height(len(summaries))  # every experiment's row, whatever the filter
        text = request.query_params.get("q", "").strip()
        if text:
            needle = text.lower()
            summaries = [s for s in summaries if needle in s["name"].lower() or needle in (s["hypothesis"] or "").lower()
                         or needle in (s["status"] or "")]  # fmt: skip
        return self.page(request, "experiments.html.j2", experiments=summaries, q=text, heights={"timeline": timeline},
                         standing=live.standing(self.store), poll_ms=LIVE_POLL_MS, title="dse: experiments")

    def history_json(self, request: Request) -> Response:
        exps = self.store.experiments()
        fig = history_figure(exps, self.store.decisions())
        return Response(fig.to_json(), media_type="application/json")

    def experiment_page(self, request: Request) -> Response:
        exp = self.experiment(request.path_params["ref"])
        if request.path_params["ref"] != str(exp["id"]):  # a name: the stable URL is the id
            return RedirectResponse(str(request.app.url_path_for("experiment", ref=str(exp["id"]))) +
                                    (f"?{request.url.query}" if request.url.query else ""), status_code=307)
        params = request.query_params
        names = self.store.metric_names(int(exp["id"]), exp["baseline_candidate_id"])
        try:
            table = self.candidate_table(exp, candidate_query(params), names)
        except BadQuery as error:
            raise Problem(400, "Bad query", str(error)) from None
        now = live.progress(self.store, exp, pd.Timestamp.now(tz="UTC").to_pydatetime())
        sweep = now["sweep"]
        last_id = self.store.last_candidate_id(int(exp["id"]))
        # This experiment's counts only (the store's summaries count every experiment's runs).
        counts = now["counts"]
        emulated = self.store.emulator_runs(int(exp["id"])).get("ok", 0)
        summary = {"n_candidates": sum(counts.values()), **{f"n_{k}": n for k, n in counts.items() if k != "not run"},
                   "n_emulated": emulated}
        decisions = records(self.store.decisions(exp["id"]))
        objectives = _objectives(exp["spec_text"])
        columns = shown_columns(params, names, objectives, exp)  # the metric columns shown (`cols`)
        y = params.get("y") or objectives[0]["metric"]
        x = params.get("x") or (objectives[1]["metric"] if len(objectives) > 1 else "private_sram_bytes")
        # The one judgement (the sweep's, `dse decide`'s, the report's): the headline and
        # the table's marks; the front of the page's Pareto plot from its figures.
        first = objectives[0]
        judgement = self.judgement(exp, first, [m for m in (x, y) if m in METRICS])
        directions = {o["metric"]: o.get("direction", "minimize") for o in objectives}
        axes = (directions.get(x, "minimize"), directions.get(y, "minimize"))
        front = self.memo.get(exp, ("front", repr(first), x, y, axes), lambda: front_of(judgement, x, y, axes))
        top = headline(judgement, exp, self.store.decision_rows(exp["id"]))
        for row in table.rows:
            outcome = judgement.outcome(row["id"])
            row["outcome"], row["judged"] = outcome or "", outcome_mark(outcome)
            row["marks"] = row_marks(row["id"], baseline_id=judgement.baseline_id, best_id=judgement.best,
                                     accepted=set(top.accepted), front=front)
            ratio = judgement.ratio(row["id"], "analytical", first["metric"])
            row["ratio"] = None if ratio != ratio else ratio
        # The Pareto plot of two of latency, energy and area (their own selector).
        ppa_x, ppa_y = params.get("ppa_x") or "energy_uj", params.get("ppa_y") or "latency_cycles"
        for name, value in (("ppa_x", ppa_x), ("ppa_y", ppa_y)):
            if value not in PPA_AXES:
                raise Problem(400, "Bad query", f"query parameter {name}={value!r}: allowed one of {', '.join(PPA_AXES)}")
        # What the search did and which knobs mattered: the report's figures (`search_history`).
        search = self.search_history(exp, first)
        # An evidence kind's by-component figure where some run of it finished.
        kinds = ["analytical", *(["emulator_cycles"] if summary.get("n_emulated") else [])]
        keep = {k: v for k, v in params.items() if k not in ("page",)}
        # Each plot's height, reserved before its figure arrives: the figure's own, of what it will show.
        shown = self.shown_candidates(exp, judgement)
        heights = {"pareto": PARETO_HEIGHT, "ppa-pareto": PARETO_HEIGHT, "search-history": SEARCH_HISTORY_HEIGHT,
                   "parallel": PARALLEL_HEIGHT, "model-vs-emulator": MODEL_VS_EMULATOR_HEIGHT,
                   "ops": op_height(len(self.op_view(exp, "cycles", shown)[0])),
                   "op-energy": op_height(len(self.op_view(exp, "energy_uj", shown)[0])),
                   **{f"components-{kind}": component_height(len(component_ids(self.component_view(exp, kind, shown),
                                                                               shown))) for kind in kinds}}
        return self.page(request, "experiment.html.j2", exp=exp, summary=summary, decisions=decisions,
                         headline=top, passing=judgement.passing_ids, first_objective=first["metric"],
                         objectives=objectives, table=table, names=names, x=x, y=y, keep=keep,
                         ppa_x=ppa_x, ppa_y=ppa_y, ppa_axes=PPA_AXES, ppa_kinds=kinds,
                         search=search, importance=importance_rows(search), heights=heights,
                         search_best=self.memo.get(exp, ("search_best", repr(first)), lambda: best_words(search)),
                         evaluator=EVALUATOR,
                         sweep=sweep, live_now=now, last_id=last_id or 0, poll_ms=LIVE_POLL_MS, columns=columns,
                         statuses=["ok", "infeasible", "pruned", "failed", "crashed", "running", "not run"],
                         page_sizes=queries.PAGE_SIZES, title=f"dse: {exp['name']}",
                         **notes.experiment_context(self.store, exp))  # fmt: skip

    def candidate_table(self, exp: dict, query: queries.CandidateQuery, names: list[str]):
        """A page of the candidate table: the matching candidates in order found once per
        query and state of the records (`memo`), every page of it read from that."""
        query = query.checked(names)
        whole = replace(query, page=1)
        ranked = self.memo.get(exp, ("ranked", repr(whole), tuple(names)),
                               lambda: queries.ranked(self.rankable(exp, names), whole, names, self.store,
                                                      int(exp["id"])))
        return queries.page_of(self.store, ranked, query, names)

    def rankable(self, exp: dict, names: list[str]) -> queries.Rankable:
        """What every sort and filter of the candidate table is worked out from, read once per
        state of the records (`memo`) with the figures the judgement reads (`judgement`):
        after the experiment's first page, another sort or filter reads no candidate again."""
        def compute() -> queries.Rankable:
            return queries.rankable(self.store, int(exp["id"]), names, figures_wanted(exp, None, METRICS))

        return self.memo.get(exp, ("rankable", tuple(names)), compute)

    def judgement(self, exp: dict, objective: dict | None = None, metrics: list[str] | tuple = ()):
        """`acceptance.judge_experiment` of the experiment (the one judgement), once per
        state of its records (`memo`); `objective` None: the spec's first. Its figures are
        the candidate table's read (`rankable`) where that holds them."""
        if objective is not None:
            objective = {"metric": objective["metric"], "direction": objective.get("direction", "minimize")}
        what = ("judgement", tuple(sorted(objective.items())) if objective else None, tuple(metrics))

        def compute():
            names = self.store.metric_names(int(exp["id"]), exp["baseline_candidate_id"])
            read = self.rankable(exp, names).figures
            wanted = figures_wanted(exp, objective, metrics)
            covered = all(kind in read and all(m in read[kind][1] for m in ms) for kind, ms in wanted.items())
            return judge_experiment(self.store, exp, objective, metrics=list(metrics), figures=read if covered else None)

        return self.memo.get(exp, what, compute)

    def search_history(self, exp: dict, objective: dict) -> SearchHistory:
        """The experiment's search history and knob importance, as the report computes them
        (once per state of its records)."""
        metric = objective["metric"]

        def compute() -> SearchHistory:
            table = self.store.candidate_metrics(int(exp["id"]), [metric] if metric in METRICS else [])
            return search_history(table, objective)

        return self.memo.get(exp, ("search", tuple(sorted(objective.items()))), compute)

    def search_json(self, request: Request) -> Response:
        """The first objective candidate after candidate, with the best so far."""
        exp = self.experiment(request.path_params["ref"])
        history = self.search_history(exp, _objectives(exp["spec_text"])[0])
        return figure_response(search_history_figure(history, title=f"{exp['name']}: {history.metric}"),
                                {"best": history.best, "importances": history.importances, "note": history.note})

    def pareto_json(self, request: Request) -> Response:
        exp = self.experiment(request.path_params["ref"])
        objectives = _objectives(exp["spec_text"])
        directions = {o["metric"]: o.get("direction", "minimize") for o in objectives}
        y = request.query_params.get("y") or objectives[0]["metric"]
        x = request.query_params.get("x") or (objectives[1]["metric"] if len(objectives) > 1 else "private_sram_bytes")
        for axis, metric in (("x", x), ("y", y)):
            if metric not in METRICS:
                raise Problem(400, "Bad query", f"query parameter {axis}={metric!r}: allowed one of {', '.join(METRICS)}")
        judged = self.judged(exp, {x, y})
        table, passing, accepted, baseline_id, exprs = (judged.table, judged.passing, judged.accepted,
                                                        judged.baseline_id, judged.exprs)
        fig, data = pareto_figure(table, x, y, (directions.get(x, "minimize"), directions.get(y, "minimize")),
                                  passing=passing, exprs=exprs, baseline_id=baseline_id, accepted=accepted,
                                  best_id=judged.best,
                                  title=f"{exp['name']}: {y.replace('_', ' ')} vs {x.replace('_', ' ')}")
        front = sorted(int(i) for i in data.loc[data["on_front"], "candidate_id"])
        summary = {"candidates": len(table), "feasible": int(data["feasible"].sum()),
                   "front": len(front), "front_ids": front, "passing": int(passing.sum()),
                   "best": judged.best, "baseline": baseline_id, "accepted": sorted(accepted),
                   "x": x, "y": y}  # fmt: skip
        return figure_response(fig, summary)

    def judged(self, exp: dict, metrics: set[str]) -> Judged:
        """The experiment's candidates with their analytical `metrics` and the first
        objective (a few of 100,000 x 8 values), judged as the sweep and `dse decide` judge
        them (`acceptance.judge_experiment`, on every evidence kind the criteria name):
        which pass, the best of those and the accepted ones."""
        objectives = _objectives(exp["spec_text"])
        exprs = [c["expr"] for c in exp["acceptance"] or []]
        first = objectives[0]
        wanted = set(metrics) | {first["metric"]}
        table = self.store.candidate_metrics(int(exp["id"]), sorted(wanted & set(METRICS)))
        judgement = self.judgement(exp, first)
        passing = judgement.mask(table["candidate_id"].astype(int).tolist())
        return Judged(table, passing, judgement.best, accepted_candidates(self.store.decisions(exp["id"])),
                      exp["baseline_candidate_id"], exprs, objectives)

    def parallel_json(self, request: Request) -> Response:
        exp = self.experiment(request.path_params["ref"])
        objectives = _objectives(exp["spec_text"])
        table = self.store.candidate_metrics(int(exp["id"]), [o["metric"] for o in objectives if o["metric"] in METRICS])
        fig, data = parallel_figure(table, objectives, title=f"{exp['name']}: knobs to objectives")
        return figure_response(fig, {"lines": len(data), "feasible": int((table["status"] == "ok").sum())})

    def ops_json(self, request: Request) -> Response:
        """Where the cycles (``?metric=cycles``, the default) or the energy
        (``?metric=energy_uj``) go, op by op, for the baseline, best and accepted candidates."""
        exp = self.experiment(request.path_params["ref"])
        metric = request.query_params.get("metric", "cycles")
        if metric not in OP_METRICS:
            raise Problem(400, "Bad query", f"query parameter metric={metric!r}: allowed one of {', '.join(OP_METRICS)}")
        labels, per_op = self.op_view(exp, metric, self.shown_candidates(exp))
        what = "cycles" if metric == "cycles" else "energy"
        fig = op_figure(per_op, labels, metric, title=f"{exp['name']}: analytical {what} per op")
        return figure_response(fig, {"candidates": [{"id": i, "label": label} for i, label in labels.items()],
                                      "ops": [str(c) for c in per_op.columns], "metric": metric})

    def shown_candidates(self, exp: dict, judgement=None) -> dict[int, str]:
        """{candidate: label} of the baseline, best and accepted candidates (feasible ones) the
        per-op and by-component figures show (`meaningful_candidates`): the page reserves
        those figures' heights from them, their endpoints draw them. The statuses from the
        candidate table's read (`rankable`: latest analytical run's), the decisions fresh;
        the best the one judgement's (`judgement`, the page's: its best whatever figures it read along)."""
        names = self.store.metric_names(int(exp["id"]), exp["baseline_candidate_id"])
        ranked = self.rankable(exp, names)
        best = (judgement or self.judgement(exp, _objectives(exp["spec_text"])[0])).best
        accepted = accepted_candidates(self.store.decisions(exp["id"]))
        named = np.isin(ranked.ids, [i for i in (exp["baseline_candidate_id"], best, *accepted) if i is not None])
        statuses = pd.DataFrame({"candidate_id": ranked.ids[named], "status": ranked.status[named]})
        return meaningful_candidates(statuses, exp["baseline_candidate_id"], best, accepted)

    def op_view(self, exp: dict, metric: str, labels: dict[int, str]) -> tuple[dict[int, str], pd.DataFrame]:
        """The per-op figure's candidates (those of `labels`, `shown_candidates`', with per-op
        `metric` values) and their per-op table, once per state of the records and labels."""
        def compute() -> tuple[dict[int, str], pd.DataFrame]:
            per_op = self.store.op_metric_table(int(exp["id"]), list(labels), metric) if labels else pd.DataFrame()
            return {i: label for i, label in labels.items() if i in per_op.index}, per_op

        return self.memo.get(exp, ("ops", metric, tuple(labels.items())), compute)

    def component_view(self, exp: dict, kind: str, labels: dict[int, str]) -> object:
        """The by-component figures of `kind` of `labels` (`shown_candidates`'; the figure
        draws those that have some: `component_ids`), once per state of the records and labels."""
        return self.memo.get(exp, ("components", kind, tuple(labels.items())),
                             lambda: self.store.component_figures(int(exp["id"]), list(labels), kind))

    def components_json(self, request: Request) -> Response:
        """Area and energy by component of the baseline, best and accepted candidates, one
        evidence kind (``?kind=analytical``, the default, or ``emulator_cycles``)."""
        exp = self.experiment(request.path_params["ref"])
        kind = _ppa_kind(request.query_params)
        labels = self.shown_candidates(exp)
        figures = self.component_view(exp, kind, labels)
        fig = component_figure(figures, labels, title=f"{exp['name']}: area and energy by component ({kind})")
        return figure_response(fig, _components_summary(figures, labels))

    def candidate_components_json(self, request: Request) -> Response:
        """One candidate's area and energy by component, one evidence kind (``?kind=``)."""
        ident = record_id(request.path_params["ident"], what="candidate")
        kind = _ppa_kind(request.query_params)
        try:
            cand = self.store.candidate(ident)
        except RecordNotFound as error:
            raise Problem(404, "No such candidate", str(error)) from None
        labels = {ident: "baseline" if cand["is_baseline"] else "this candidate"}
        figures = self.store.component_figures(int(cand["experiment_id"]), [ident], kind)
        fig = component_figure(figures, labels, title=f"candidate {ident}: area and energy by component ({kind})")
        return figure_response(fig, _components_summary(figures, labels))

    def candidate_banks_json(self, request: Request) -> Response:
        """The bank lifetimes the candidate's latest emulator run recorded, as a chart."""
        ident = record_id(request.path_params["ident"], what="candidate")
        try:
            self.store.candidate(ident)
        except RecordNotFound as error:
            raise Problem(404, "No such candidate", str(error)) from None
        run_id, lives = stored_bank_lifetimes(self.store, ident)
        fig = bank_lifetime_figure(lives, title=f"candidate {ident}: bank lifetimes (emulator run r{run_id})")
        return figure_response(fig, {"run_id": run_id, "lifetimes": len(lives),
                                      "cores": len({life["core"] for life in lives})})

    def model_vs_emulator_json(self, request: Request) -> Response:
        exp = self.experiment(request.path_params["ref"])
        emulated_any = self.store.emulator_runs(int(exp["id"])).get("ok", 0)
        # (no emulator run: nothing more to read, at 100,000 candidates)
        table = self.store.candidate_metrics(int(exp["id"]), ["latency_cycles"]) if emulated_any else pd.DataFrame()
        emulated = model_vs_emulator(self.store, int(exp["id"]), table, bool(emulated_any))
        fig = model_vs_emulator_figure(emulated, title=f"{exp['name']}: analytical estimate vs emulator cycles")
        rows = [{"candidate_id": int(r["candidate_id"]), "analytical_cycles": float(r["analytical_cycles"]),
                 "emulator_cycles": float(r["emulator_cycles"]), "error_pct": float(r["error_pct"])}
                for r in emulated.to_dict("records")]
        return figure_response(fig, {"rows": rows})

    def live_json(self, request: Request) -> Response:
        """A sweep in progress, for the page that polls it: whether it still runs, the
        candidates by outcome, the percent done and the ETA, the headline (the best passing
        candidate so far) and the candidates recorded after the `after` id."""
        exp = self.experiment(request.path_params["ref"])
        after = number(request.query_params, "after", 0, low=0, high=MAX_ID)
        # Candidates the page shows as running or not run yet: their outcome since.
        watch = id_list(request.query_params.getlist("watch"), "watch", limit=LIVE_WATCH_MAX)
        objective = _objectives(exp["spec_text"])[0]["metric"]
        # How far (counts, percent, ETA) and the best passing so far: `live`'s, the one judgement's.
        body = live.progress(self.store, exp, pd.Timestamp.now(tz="UTC").to_pydatetime())
        new = self.store.candidates_after(int(exp["id"]), after)
        updated = self.store.page_rows(sorted(int(w) for w in watch), int(exp["id"]))
        exp = self.store.experiment(int(exp["id"]))
        body.update({"status": exp["status"], "objective": objective,
                     "headline": live.headline_json(live.judged_headline(self.store, exp, self.judgement(exp))),
                     "last_id": max([after, *(r["id"] for r in new)]),
                     "new": [_live_row(r, objective) for r in new],
                     "updated": [_live_row(r, objective) for r in updated]})
        return Response(json.dumps(body), media_type="application/json", headers={"Cache-Control": "no-store"})

    def candidate_page(self, request: Request) -> Response:
        ident = record_id(request.path_params["ident"], what="candidate")
        try:
            cand = self.store.candidate(ident)
        except RecordNotFound as error:
            raise Problem(404, "No such candidate", str(error)) from None
        runs = self.store.runs(candidate=ident)
        metrics = [dict(self.store.run(int(r))["metrics"].assign(run_id=int(r)).to_dict("list")) for r in runs["id"]]
        long = pd.concat([pd.DataFrame(m) for m in metrics], ignore_index=True) if metrics else pd.DataFrame(
            columns=["kind", "name", "value", "unit", "scope", "scope_key", "run_id"])
        evidence = []
        for kind, group in long.groupby("kind", sort=False):
            latest = group[group["run_id"] == group["run_id"].max()]
            total = latest[latest["scope"] == "total"][["name", "value", "unit"]].to_dict("records")
            # Area and energy by component: a table and a stacked bar of their own.
            scoped = latest[~latest["scope"].isin(("total", "component"))]
            evidence.append({"kind": kind, "run_id": int(latest["run_id"].iloc[0]), "total": total,
                             "components": _component_rows(latest),
                             "scoped": {scope: g.pivot_table(index="scope_key", columns="name", values="value",
                                                              aggfunc="last", sort=False).reset_index()
                                        for scope, g in scoped.groupby("scope", sort=False)}})  # fmt: skip
        artifacts = records(self.store.artifacts(candidate=ident))  # a reused run's: the earlier run's files
        decisions = self.store.decisions(cand["experiment_id"])
        decisions = records(decisions[decisions["candidate_id"] == ident])
        exp = self.store.experiment(cand["experiment_id"])
        banks_run, lives = stored_bank_lifetimes(self.store, ident)
        return self.page(request, "candidate.html.j2", cand=cand, exp=exp, runs=records(runs), decide_candidate=ident,
                         evidence=evidence, artifacts=artifacts, decisions=decisions, ppa_kinds=PPA_KINDS,
                         banks_run=banks_run, banks_count=len(lives),
                         heights={"banks-plot": bank_lifetime_height(len(set(bank_rows(lives)))),
                                  # one candidate's bar, or none (the figure keeps a bar's room)
                                  **{f"components-{kind}": component_height(1) for kind in PPA_KINDS}},
                         title=f"dse: candidate {ident}", note_back=str(request.app.url_path_for("candidate", ident=str(ident))),
                         **notes.candidate_context(self.store, cand))  # fmt: skip

    def run_page(self, request: Request) -> Response:
        ident = record_id(request.path_params["ident"], what="run")
        try:
            run = self.store.run(ident)
        except RecordNotFound as error:
            raise Problem(404, "No such run", str(error)) from None
        artifacts = records(self.store.artifacts(run=ident))
        return self.page(request, "run.html.j2", run=run, metrics=records(run["metrics"]),
                         artifacts=artifacts, cand=self.store.candidate(int(run["candidate_id"])),
                         title=f"dse: run {ident}")  # fmt: skip

    def artifact(self, request: Request) -> Response:
        ident = record_id(request.path_params["ident"], what="artifact")
        rows = self.store.artifacts()
        rows = rows[rows["id"] == ident]
        if rows.empty:
            raise Problem(404, "No such artifact", f"no artifact with id {ident} in {self.store_shown}")
        row = rows.iloc[0]
        if self.store.evidence_dir is None:
            raise Problem(410, "Artifact file missing", f"artifact {ident}: {self.store_shown} has no evidence folder")
        try:  # re-hashed through the handle that is then served; a link is never followed
            source = open_verified(self.store.evidence_dir, row["sha256"])
        except EvidenceError as error:
            status, title = {"missing": (410, "Artifact file missing"), "altered": (409, "Artifact file altered"),
                             "refused": (403, "Artifact file refused")}[error.state.state]
            raise Problem(status, title, f"artifact {ident}: {error}") from None
        name = quote(Path(str(row["name"] or f"artifact-{ident}")).name)  # as FileResponse names it
        return StreamingResponse(iter(lambda: source.read(1 << 20), b""), background=BackgroundTask(source.close),
                                 media_type=row["media_type"] or "application/octet-stream",
                                 headers={"Content-Disposition": f"attachment; filename*=utf-8''{name}"})

    def compare(self, request: Request) -> Response:
        ids = id_list(request.query_params.getlist("c"), "c", prefix="c")
        cands = []
        for ident in ids:
            try:
                cands.append(self.store.candidate(ident))
            except RecordNotFound as error:
                raise Problem(404, "No such candidate", str(error)) from None
        fields, metrics, workloads = _comparison(self.store, cands) if cands else ([], [], {})
        return self.page(request, "compare.html.j2", cands=cands, fields=fields, metrics=metrics,
                         workloads=workloads, show_all=request.query_params.get("all") == "1",
                         title="dse: compare")  # fmt: skip

    async def decide(self, request: Request) -> Response:
        exp = self.experiment(request.path_params["ref"])
        form = await request.form()
        try:
            csrf.check(request, form)
        except csrf.CsrfRejected as error:
            raise Problem(403, "Form refused", str(error)) from None
        try:
            self._decide(exp, form)
        except Problem as problem:  # refused: the form again, with what was typed in it
            return notes.refused(self, request, "decision", exp, problem, notes.form_values(form, notes.DECISION_FIELDS),
                                 back=str(form.get("back", "")))
        url = request.app.url_path_for("experiment", ref=str(exp["id"]))
        return RedirectResponse(f"{url}#decisions", status_code=303)

    def _decide(self, exp: dict, form) -> None:
        """`decide` (the one holder of the rules, as `dse decide`) on the form's fields;
        Problem when refused (nothing written)."""
        verdict = str(form.get("verdict", ""))
        if verdict not in ("accept", "reject"):
            raise Problem(400, "Decision not recorded", f"field 'verdict': got {verdict!r}; allowed: accept or reject")
        try:
            author, why = form_text(form, "author", 200), form_text(form, "why", 10_000, lines=True)
            override = form_text(form, "override", 10_000, lines=True) or None
        except BadParameter as error:
            raise Problem(400, "Decision not recorded", str(error)) from None
        if not author:
            raise Problem(400, "Decision not recorded", "field 'author': empty; allowed: your name (who decides)")
        try:
            candidate = record_id(str(form.get("candidate", "")).strip().lstrip("cC"), "candidate", "candidate", "form")
        except BadParameter as error:
            raise Problem(400, "Decision not recorded", str(error)) from None
        try:  # the same rules as `dse decide`: the one function that holds them
            decide(self.store, int(exp["id"]), candidate, author, why, override,
                   "accepted" if verdict == "accept" else "rejected")
        except RecordNotFound as error:
            raise Problem(404, "Decision not recorded", str(error)) from None
        except (InputError, ValueError) as error:
            raise Problem(400, "Decision not recorded", str(error)) from None

    def plotly_js(self, request: Request) -> Response:
        # Served from the installed plotly package: the UI works offline.
        return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


def _live_row(row: dict, objective: str) -> dict:
    return {"id": row["id"], "origin": row["origin"], "status": row["status"] or "not run",
            "changes": queries.changes_text(row["diff"]), "value": row["metrics"].get(objective)}


@dataclass
class Judged:
    table: pd.DataFrame  # candidate_metrics rows
    passing: object  # numpy bool per row: meets every acceptance criterion
    best: int | None
    accepted: set[int]
    baseline_id: int | None
    exprs: list[str]
    objectives: list[dict]


def _ppa_kind(params) -> str:
    kind = params.get("kind", "analytical")
    if kind not in PPA_KINDS:
        raise Problem(400, "Bad query", f"query parameter kind={kind!r}: allowed one of {', '.join(PPA_KINDS)}")
    return kind


def _components_summary(figures, labels: dict[int, str]) -> dict:
    """What a by-component figure shows, as numbers: per candidate drawn, its components'
    area and energy and its run's recorded totals (the page's text, and the tests' check)."""
    out = []
    for i in figures.candidates:
        parts = figures.of(i)
        totals = figures.totals.loc[i]
        out.append({"id": i, "label": labels.get(i, ""), "run_id": int(totals["run_id"]),
                    "components": [{"component": r["component"], "area_mm2": _finite(r["area_mm2"]),
                                    "energy_uj": _finite(r["energy_uj"])} for r in parts.to_dict("records")],
                    "totals": {k: _finite(totals[k]) for k in ("area_mm2", "energy_uj", "power_mw")}})
    return {"kind": figures.kind, "candidates": out,
            "missing": [{"id": i, "label": label} for i, label in labels.items() if i not in figures.candidates]}


def _finite(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _component_rows(metrics: pd.DataFrame) -> dict | None:
    """One run's area and energy by component (scope "component"), in the order recorded
    (`dse.ppa.components.COMPONENTS`), each with its share of the run's recorded total:
    {"rows": [...], "total": {...}}; None when the run has none."""
    parts = metrics[metrics["scope"] == "component"]
    if parts.empty:
        return None
    wide = parts.pivot_table(index="scope_key", columns="name", values="value", aggfunc="last", sort=False)
    totals = metrics[metrics["scope"] == "total"].set_index("name")["value"]
    total = {name: _finite(totals.get(name)) for name in ("area_mm2", "energy_uj", "power_mw")}
    rows = []
    for component, r in wide.iterrows():
        row = {"component": component}
        for name in ("area_mm2", "energy_uj"):
            value = _finite(r.get(name))
            row[name] = value
            row[f"{name}_share"] = value / total[name] if value is not None and total[name] else None
        rows.append(row)
    return {"rows": rows, "total": total}


def _comparison(store: Store, cands: list[dict]):
    """Fields (config, mapping) that differ across the candidates, and their total metrics
    kind by kind (each candidate's latest run of that kind)."""
    flat = [{**flatten(c["config"], "config."), **flatten(c["mapping"], "mapping.")} for c in cands]
    keys = sorted(set().union(*flat), key=lambda k: (not k.startswith("config."), k))
    fields = []
    for key in keys:
        values = [f.get(key) for f in flat]
        shown = [json.dumps(v, sort_keys=True) for v in values]
        fields.append({"field": key, "values": shown, "differs": len(set(shown)) > 1})
    per = []
    for c in cands:
        runs = store.runs(candidate=int(c["id"]))
        mine: dict[tuple, tuple] = {}
        for run_id in runs["id"].sort_values(ascending=False):
            m = store.run(int(run_id))["metrics"]
            for r in m[m["scope"] == "total"].itertuples():
                mine.setdefault((r.kind, r.name), (r.value, r.unit, int(run_id)))
        per.append(mine)
    metric_keys = sorted(set().union(*per)) if per else []
    metrics = []
    for kind, name in metric_keys:
        values = [p.get((kind, name)) for p in per]
        unit = next((v[1] for v in values if v), "")
        nums = [v[0] if v else None for v in values]
        first = nums[0]
        ratios = [None if (n is None or not first) else n / first for n in nums]
        metrics.append({"kind": kind, "name": name, "unit": unit, "values": nums, "ratios": ratios,
                        "runs": [v[2] if v else None for v in values]})  # fmt: skip
    workloads = {int(c["experiment_id"]): store.experiment(int(c["experiment_id"])) for c in cands}
    return fields, metrics, workloads


def create_app(store: Store, access: Access | None = None) -> Starlette:
    """The web app over an open store (the caller closes it), behind the guard (`guard`:
    Host names, the token of an exposed server, parameters, error ids)."""
    bench = Workbench(store)

    async def problem(request: Request, exc: Problem) -> Response:
        return bench.page(request, "error.html.j2", status=exc.status, problem=exc, title=f"dse: {exc.title}")

    async def bad_query(request: Request, exc: BadQuery) -> Response:
        return await problem(request, Problem(400, "Bad query", str(exc)))

    async def http_error(request: Request, exc: HTTPException) -> Response:
        titles = {404: "Page not found", 405: "Method not allowed"}
        detail = f"no page at {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return bench.page(request, "error.html.j2", status=exc.status_code,
                          problem=Problem(exc.status_code, titles.get(exc.status_code, "Error"), detail),
                          title="dse: error")  # fmt: skip

    routes = [
        Route("/", bench.experiments, name="experiments"),
        Route("/history.json", bench.history_json, name="history_json"),
        Route("/experiments/{ref}", bench.experiment_page, name="experiment"),
        Route("/experiments/{ref}/pareto.json", bench.pareto_json, name="pareto_json"),
        Route("/experiments/{ref}/live.json", bench.live_json, name="live_json"),
        Route("/experiments/{ref}/search.json", bench.search_json, name="search_json"),
        Route("/experiments/{ref}/parallel.json", bench.parallel_json, name="parallel_json"),
        Route("/experiments/{ref}/ops.json", bench.ops_json, name="ops_json"),
        Route("/experiments/{ref}/components.json", bench.components_json, name="components_json"),
        Route("/experiments/{ref}/model-vs-emulator.json", bench.model_vs_emulator_json, name="model_vs_emulator_json"),
        Route("/experiments/{ref}/decisions", bench.decide, methods=["POST"], name="decide"),
        Route("/experiments/{ref}/notes", partial(notes.add_note, bench), methods=["POST"], name="add_note"),
        Route("/candidates/{ident}", bench.candidate_page, name="candidate"),
        Route("/candidates/{ident}/components.json", bench.candidate_components_json, name="candidate_components_json"),
        Route("/candidates/{ident}/banks.json", bench.candidate_banks_json, name="candidate_banks_json"),
        Route("/runs/{ident}", bench.run_page, name="run"),
        Route("/artifacts/{ident}", bench.artifact, name="artifact"),
        Route("/artifacts/{ident}/view", partial(artifacts.view, bench), name="artifact_view"),
        Route("/artifacts/{ident}/heatmap.json", partial(artifacts.heatmap_json, bench), name="artifact_heatmap"),
        Route("/compare", bench.compare, name="compare"),
        Route("/static/plotly.min.js", bench.plotly_js, name="plotly_js"),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={Problem: problem, BadQuery: bad_query,
                                                     HTTPException: http_error},
                    middleware=[Middleware(Guard, access=access or Access())])
    app.state.workbench = bench
    return app
