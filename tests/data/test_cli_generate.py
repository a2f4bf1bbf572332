"""`depthbench generate`: the summary, --json, and one-line exit-2 refusals with nothing left."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from depthbench.cli.main import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_generate_writes_a_dataset_and_json_summary(tmp_path):
    r = run("generate", "--out", str(tmp_path / "d"), "--set", "exposure=1", "--set", "n_people=50",
            "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    # 3 of 6 attributes of 64 values asked per person
    assert summary["people"] == 50 and summary["ceiling_bits"] == pytest.approx(18.0)
    assert (tmp_path / "d" / "manifest.json").is_file()


def test_config_file_and_overrides_layer(tmp_path):
    (tmp_path / "c.toml").write_text(
        'n_people = 30\nname_pool = 8\norders_per_person = 1\n[[attributes]]\nname = "x"\nn_values = 5\n'
        '[[attributes]]\nname = "y"\nn_values = 9\nvalue_tokens = 1\n')
    r = run("generate", "--out", str(tmp_path / "d"), "--config", str(tmp_path / "c.toml"),
            "--set", "exposure=1", "--set", "n_people=20", "--seed", "4", "--json")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert m["counts"]["people"] == 20 and m["seed"] == 4
    assert [a["name"] for a in m["config"]["attributes"]] == ["x", "y"]


REFUSED = [
    (["--set", "attributes=only:10"], "at least 2 attributes"),
    (["--set", "orders_per_person=601"], "orders_per_person"),
    (["--set", "name_pool=3"], "name_pool"),
    (["--set", "value_pool=7"], "value_pool"),
    (["--set", "exposure=1", "--set", "n_people=0"], "n_people"),
    (["--set", "n_people=abc"], "n_people"),
    (["--set", "bogus=1"], "unknown config key"),
    (["--set", "noequals"], "key=value"),
    (["--set", "attributes=a:1,b:5"], "n_values"),
    (["--set", "attributes=a:5,a:5"], "distinct"),
    (["--preset", "huge"], "unknown preset"),
    (["--config", "/nonexistent.toml"], "does not exist"),
    (["--seed", "-1"], "seed"),
]


@pytest.mark.parametrize("args,needle", REFUSED)
def test_refused_configs_exit_2_with_one_line_and_write_nothing(tmp_path, args, needle):
    r = run("generate", "--out", str(tmp_path / "d"), *args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("depthbench: error:")
    assert not (tmp_path / "d").exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_toml_and_non_empty_out(tmp_path):
    (tmp_path / "bad.toml").write_text("n_people = = 3")
    r = run("generate", "--out", str(tmp_path / "d"), "--config", str(tmp_path / "bad.toml"))
    assert r.exit_code == 2 and "not valid TOML" in r.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("precious")
    r = run("generate", "--out", str(tmp_path / "full"))
    assert r.exit_code == 2 and "--force" in r.stderr
    assert (tmp_path / "full" / "keep.txt").read_text() == "precious"


def test_real_process_prints_no_traceback(tmp_path):
    p = subprocess.run([sys.executable, "-m", "depthbench", "generate", "--out",
                        str(tmp_path / "d"), "--set", "orders_per_person=1000"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
