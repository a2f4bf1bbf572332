"""Specs and grids: one schedule spelled two ways is one schedule, runs that would share a name
or an axis that rounds to nothing are refused, and what a machine cannot run (cuda here, slurm
without SLURM) is refused before the first stage."""

import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from refusals import cli, one_line, one_line_exit_2

from depthbench.cli.main import main
from depthbench.errors import UserError
from depthbench.pipeline.spec import TrainSpec
from depthbench.schedules import parse_schedule

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


SPELLINGS = st.sampled_from(["fixed:{k}", "fixed:0{k}", " fixed:{k} ", "fixed:00{k}"])


@SETTINGS
@given(st.integers(1, 9), SPELLINGS, SPELLINGS)
def test_one_schedule_spelled_two_ways_is_one_schedule(k, a, b):
    a, b = a.format(k=k), b.format(k=k)
    assert parse_schedule(a).canonical == parse_schedule(b).canonical == f"fixed:{k}"
    with pytest.raises(UserError, match="must not repeat"):
        TrainSpec.from_dict({"schedules": [a, b]})


@SETTINGS
@given(st.sampled_from(["fixed:4", "uniform:1-16", "fixed-first:0.8:4:1-16",
                        "fixed-first:0.670:4:01-16", "curriculum:1-16:0.5",
                        "poisson-lognormal:mean=8,max=16", "poisson-lognormal:max=16,mean=4.5,sigma=0.7"]))
def test_the_canonical_spelling_is_the_same_schedule(spec):
    a, b = parse_schedule(spec), parse_schedule(parse_schedule(spec).canonical)
    assert b.canonical == a.canonical
    assert (a.depths(300, 7) == b.depths(300, 7)).all()


@SETTINGS
@given(st.lists(st.floats(0.005, 1.0), min_size=2, max_size=4, unique=True))
def test_budgets_whose_runs_would_share_a_name_are_refused(budgets):
    ids = [round(100 * b) for b in budgets]
    if len(set(ids)) < len(ids):
        with pytest.raises(UserError, match="budgets"):
            TrainSpec.from_dict({"budgets": budgets})
    else:
        assert TrainSpec.from_dict({"budgets": budgets}).budgets == tuple(budgets)


def test_run_with_out_writes_its_report_there_not_under_the_current_directory(tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "quickstart.toml"  # named like the packaged experiment
    spec.write_text('name = "quickstart"\n[data]\n'
                    'set = { exposure = 1, n_people = 24, n_unseen_people = 4 }\n'
                    '[train]\nschedules = ["fixed:2"]\nsteps = 3\nset = { d_model = 16, '
                    'batch_size = 4, warmup_steps = 1, log_every = 1 }\n[eval]\ndepths = "1-2"\n'
                    'splits = ["eval_reordered"]\n[probe]\nenabled = false\n[serve]\n'
                    'enabled = false\n[run]\nworkers = 1\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", "exp"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "exp" / "report" / "index.html").is_file()
    assert not (tmp_path / "reports").exists()


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="this machine has SLURM")
def test_slurm_without_slurm_is_one_line(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "e"), "--executor",
                                  "slurm"])
    assert r.exit_code == 2 and "sbatch" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "e").exists()


def test_cuda_on_a_cpu_machine_is_refused_before_any_stage(tmp_path, monkeypatch):
    from depthbench import runtime
    monkeypatch.setattr(runtime, "cuda_available", lambda: False)
    spec = tmp_path / "s.toml"
    spec.write_text('[train]\nschedules = ["fixed:2"]\n[serve]\nenabled = false\n'
                    '[run]\ndevice = "cuda"\n')
    r = CliRunner().invoke(main, ["run", str(spec), "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "no CUDA GPU" in r.stderr
    assert not (tmp_path / "e").exists(), "nothing generated first"


def test_cuda_named_in_train_set_is_refused_before_generate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(
        '[data]\npreset = "tiny"\nset = { exposure = 1, n_people = 24, n_unseen_people = 4, name_pool = 8 }\n'
        '[train]\nschedules = ["fixed:2"]\nsteps = 4\nset = { device = "cuda" }\n'
        '[serve]\nenabled = false\n[probe]\nenabled = false\n')
    one_line(CliRunner().invoke(main, ["run", "s.toml", "--out", "exp"]), "cuda")
    assert not (tmp_path / "exp").exists()


@pytest.mark.parametrize("axis,needle", [
    ("lengths = [0.01, 1]", "train.lengths: 0.01 x"),
    ("budgets = [0.01, 1.0]\nbudget_schedule = \"uniform:1-4\"", "train.budgets: 0.01 of the FLOP"),
])
def test_axes_that_round_to_nothing_are_refused(tmp_path, axis, needle):
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "ax"\n[data]\npreset = "tiny"\n[train]\npreset = "tiny"\nschedules = '
                    f'["uniform:1-4"]\nseeds = [0]\nsteps = 6\n{axis}\n[serve]\nenabled = false\n'
                    '[probe]\nenabled = false\n')
    one_line_exit_2(cli(["run", spec, "--plan", "--out", tmp_path / "o"]), needle)


# a value the stage config accepts and that differs from the spec's default, per field type
_OTHER = {"int": lambda v: (v or 0) + 2, "float": lambda v: (v or 0.0) + 0.25,
          "bool": lambda v: not v, "int | None": lambda v: 3, "float | None": lambda v: 0.5}


@pytest.mark.parametrize("section", ["eval", "probe", "serve"])
def test_every_stage_knob_reaches_the_stage_from_the_spec(tmp_path, section):
    """[eval], [probe] and [serve] are templates of their stage configs: each numeric or
    boolean key the command takes (all but the ones the grid fills) lands, as given, in every
    stage of that kind that ``Grid`` builds."""
    import dataclasses
    from pathlib import Path

    from depthbench.pipeline.grid import Grid
    from depthbench.pipeline.spec import SECTIONS, load_spec
    cls = SECTIONS[section]
    fields = {f.name: f.type for f in dataclasses.fields(cls.STAGE)}
    base = cls.from_dict({}).to_dict()
    tried = 0
    for key in cls.known():
        if key in cls.own() or fields[key] not in _OTHER:
            continue
        value = _OTHER[fields[key]](base[key])
        if key in ("pool", "admit_min", "min_coda_batch", "coda_wait", "width"):
            value = 64 + 2 * tried          # a pool holds a core launch (the grid's width: 32)
        if key in ("depth_a", "depth_b", "min_depth", "seed"):
            value = 3
        if key == "max_new_tokens":
            value = 6
        if key == "lr":
            value = 0.5
        spec = tmp_path / f"{key}.toml"
        probed = "[train]\nschedules = ['uniform:1-16', 'fixed-first:0.8:4:1-16']\n"
        spec.write_text(f"name = 'k'\n[{section}]\n{key} = {str(value).lower()}\n"
                        + (probed if section == "probe" else ""))
        try:
            stages = [st for g in Grid(load_spec(spec), Path("runs/k")).stages() for st in g]
        except UserError as e:   # a value the config refuses for a reason of its own
            pytest.fail(f"{section}.{key} = {value}: {e}")
        kind = {"eval": "eval", "probe": "probe-update", "serve": "serve-bench"}[section]
        got = [st.config[key] for st in stages if st.command == kind]
        assert got and all(g == value for g in got), (key, value, got)
        tried += 1
    assert tried >= {"eval": 2, "probe": 5, "serve": 15}[section]


@pytest.mark.parametrize("body, needle", [
    ("[serve]\nrun = 'x'\n", "serve.run is set by the grid"),
    ("[eval]\ncheckpoint = 3\n", "eval.checkpoint is set by the grid"),
    ("[serve]\nrequests = 0\n", "serve.requests: must be in 1..1048576"),
    ("[serve]\nwidth = 64\npool = 8\n", "serve.pool"),
    ("[serve]\nmax_new_tokens = 1\n", "serve.max_new_tokens"),
    ("[eval]\nmax_people = 0\n", "eval.max_people"),
    ("[probe]\nlr = 2.0\n", "probe.lr"),
    ("[serve]\nmodes = ['cdb']\n", "serve.modes: must include static"),
])
def test_a_template_key_is_refused_as_its_command_refuses_it(tmp_path, body, needle):
    """The stage config checks a spec's keys (one validation): the message names the section."""
    spec = tmp_path / "s.toml"
    spec.write_text(body)
    r = cli(["run", spec, "--plan", "--out", tmp_path / "o"])
    one_line_exit_2(r, needle)
    assert not (tmp_path / "o").exists()


def test_a_template_section_round_trips_through_its_flat_spelling():
    """Every packaged spec's [eval], [probe] and [serve] written flat (as a spec spells them,
    every key of the template) read back equal, and give the same stage config."""
    from depthbench.pipeline.spec import SECTIONS, load_spec, packaged_names
    for name in packaged_names():
        spec = load_spec(name)
        for sec in ("eval", "probe", "serve"):
            section = getattr(spec, sec)
            again = SECTIONS[sec].from_dict(section.to_dict())
            assert again == section, (name, sec)
            assert again.config(run="r", out="o") == section.config(run="r", out="o")
