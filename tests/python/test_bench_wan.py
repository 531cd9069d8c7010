"""bench/wan/wan.py (issue 32's WAN benchmark): its option probe against
real `rumor launch` runs, and its figures (compute share over the training
phase, seconds and bytes to the target, projections from a prefix)
against hand-computed values on metrics files written here."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench", "wan"))

import wan  # noqa: E402

RUMOR = os.environ.get("RUMOR_BIN", os.path.join(ROOT, "build", "bin",
                                                  "rumor"))


@pytest.mark.parametrize("extra,want", [
    (["--no-such-option", "1"], "missing"),  # unknown to the build
    (["--seed", "2"], "ok"),  # changes the run's model
    (["--log-level", "warn"], "not implemented"),  # parsed, no effect
    (["--gamma", "-1"], "refused: "),  # refused by the node
])
def test_probe__real_runs__tells_missing_effect_and_no_effect(
        tmp_path, monkeypatch, extra, want):
    monkeypatch.setitem(wan.PROBES, "x", (["--algo", "dpsgd"], extra))
    got = wan.probe(os.path.abspath(RUMOR), str(tmp_path), "x")
    assert got.startswith(want) if want.endswith(" ") else got == want


def test_seconds_eval__real_run__grows_at_evaluations_only(tmp_path):
    """What metrics() subtracts: the time of the node's evaluations, within
    seconds_compute, grown at evaluation steps (every 3, and the last)."""
    d = str(tmp_path / "run")
    subprocess.run([os.path.abspath(RUMOR), "launch", "--nodes", "2",
                    "--steps", "7", "--eval-every", "3", "--metrics-dir", d,
                    "--workload", "mlp", "--hidden", "64"] + wan.COMMON,
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    for i in range(2):
        with open(os.path.join(d, "node-%d.jsonl" % i)) as f:
            lines = [json.loads(x) for x in f]
        grew = [k + 1 for k in range(7) if lines[k]["seconds_eval"] >
                (lines[k - 1]["seconds_eval"] if k else 0.0)]
        assert grew == [3, 6, 7]
        assert all("accuracy" in lines[k - 1] for k in grew)
        for x in lines:
            assert 0 <= x["seconds_eval"] <= x["seconds_compute"]


def write_run(d, per_node):
    """per_node[i]: list of (seconds, seconds_compute, bytes, accuracy or
    None[, seconds_eval]) per step."""
    os.makedirs(d)
    for i, steps in enumerate(per_node):
        with open(os.path.join(d, "node-%d.jsonl" % i), "w") as f:
            for k, (s, c, b, acc, *ev) in enumerate(steps):
                line = {"step": k + 1, "seconds": s, "seconds_compute": c,
                        "seconds_eval": ev[0] if ev else 0.0,
                        "gossip_bytes_sent": b}
                if acc is not None:
                    line["accuracy"] = acc
                f.write(json.dumps(line) + "\n")
    with open(os.path.join(d, "average.json"), "w") as f:
        json.dump({"nodes": len(per_node), "accuracy": 0.8}, f)


def test_metrics__two_nodes__training_phase_share_and_curve(tmp_path):
    d = str(tmp_path / "run")
    write_run(d, [[(2.0, 0.5, 10e6, None), (3.0, 1.0, 20e6, 0.5),
                   (6.0, 2.0, 30e6, 0.7)],
                  [(2.5, 0.4, 12e6, None), (3.5, 0.8, 22e6, 0.6),
                   (5.5, 1.4, 32e6, 0.9)]])
    r = wan.metrics(d, 2, 3, "cmd", 9.0)
    # Node 0: 1.5 compute in 4.0 s; node 1: 1.0 in 3.0 s (step 1 left out).
    assert r["share_metrics"] == pytest.approx((1.5 / 4.0 + 1.0 / 3.0) / 2)
    assert r["train_s"] == pytest.approx(3.5)
    assert r["s_per_step"] == pytest.approx(1.75)
    assert r["first_step_s"] == pytest.approx(2.25)
    assert [c["step"] for c in r["curve"]] == [2, 3]
    assert r["curve"][1]["accuracy"] == pytest.approx(0.8)
    assert r["curve"][1]["seconds"] == pytest.approx(6.0)  # slowest node
    assert r["curve"][0]["mb"] == pytest.approx(21.0)
    assert r["final_accuracy"] == 0.8
    assert r["mb_per_node"] == pytest.approx(31.0)
    # bytes sent between the first metrics line and the last: 20 MB each
    assert r["mb_phase"] == pytest.approx(20.0)


def test_metrics__evaluations__left_out_of_every_time(tmp_path):
    d = str(tmp_path / "run")
    # node 0 evaluates 0.5 s at step 2 and 1.0 s at step 3; node 1 0.2 s
    # at step 3 only
    write_run(d, [[(2.0, 0.5, 10e6, None, 0.0), (3.0, 1.0, 20e6, 0.5, 0.5),
                   (6.0, 3.0, 30e6, 0.7, 1.5)],
                  [(2.5, 0.4, 12e6, None, 0.0), (3.5, 0.8, 22e6, 0.6, 0.0),
                   (5.5, 1.4, 32e6, 0.9, 0.2)]])
    r = wan.metrics(d, 2, 3, "cmd", 9.0)
    # node 0: 2.5 - 1.5 compute in 4.0 - 1.5 s; node 1: 0.8 in 2.8 s
    assert r["share_metrics"] == pytest.approx((1.0 / 2.5 + 0.8 / 2.8) / 2)
    assert r["train_s"] == pytest.approx((2.5 + 2.8) / 2)
    assert r["curve"][0]["seconds"] == pytest.approx(3.5)  # node 1's
    assert r["curve"][1]["seconds"] == pytest.approx(5.3)  # 5.5 - 0.2


def test_metrics__no_seconds_eval__is_an_error(tmp_path):
    d = str(tmp_path / "run")
    write_run(d, [[(1.0, 0.5, 0, None)], [(1.0, 0.5, 0, None)]])
    for i in range(2):
        path = os.path.join(d, "node-%d.jsonl" % i)
        with open(path) as f:
            line = json.loads(f.read())
        del line["seconds_eval"]
        with open(path, "w") as f:
            f.write(json.dumps(line) + "\n")
    assert "seconds_eval" in wan.metrics(d, 2, 1, "cmd", 1.0)["error"]


def test_metrics__short_file__is_an_error(tmp_path):
    d = str(tmp_path / "run")
    write_run(d, [[(1.0, 0.5, 0, None)], [(1.0, 0.5, 0, None),
                                          (2.0, 1.0, 0, None)]])
    assert "error" in wan.metrics(d, 2, 2, "cmd", 1.0)


def test_timed__accuracy_run_with_the_timing_runs_seconds():
    acc = {"command": "acc", "steps": 6, "first_step_s": 9.0,
           "s_per_step": 9.0, "train_s": 45.0, "share_metrics": 0.5,
           "wall_s": 50.0, "load": 1.0, "cpu": "x", "skipped": 1,
           "final_accuracy": 0.8, "mb_per_node": 6.0, "times": {},
           "curve": [{"step": 3, "accuracy": 0.7, "seconds": 20.0, "mb": 3},
                     {"step": 6, "accuracy": 0.8, "seconds": 45.0, "mb": 6}]}
    tim = {"command": "timing", "steps": 6, "first_step_s": 1.0,
           "s_per_step": 1.0, "train_s": 5.0, "share_metrics": 0.9,
           "wall_s": 7.0, "load": 2.0, "cpu": "x", "skipped": 0,
           "final_accuracy": 0.8, "mb_per_node": 6.0,
           "times": {"3": 3.0, "6": 6.5}, "curve": []}
    r = wan.timed(acc, tim)
    assert [c["seconds"] for c in r["curve"]] == [3.0, 6.5]
    assert [c["accuracy"] for c in r["curve"]] == [0.7, 0.8]
    assert (r["train_s"], r["share_metrics"], r["command"]) == (
        5.0, 0.9, "timing")
    assert r["accuracy_command"] == "acc" and r["skipped"] == 1
    assert "timing_final_accuracy" not in r and "times" not in r
    assert acc["curve"][0]["seconds"] == 20.0  # untouched
    tim["final_accuracy"] = 0.79
    assert wan.timed(acc, tim)["timing_final_accuracy"] == 0.79
    assert wan.timed(acc, {"error": "x"}) == {"error": "x"}


def test_project_and_analyse__prefix_timing__hand_computed(tmp_path):
    full = {"command": "full", "steps": 5, "first_step_s": 1.0,
            "s_per_step": 0.5, "train_s": 2.0, "share_metrics": 0.9,
            "skipped": 0, "final_accuracy": 0.80, "mb_per_node": 50.0,
            "curve": [{"step": 3, "accuracy": 0.70, "seconds": 2.0,
                       "mb": 30.0},
                      {"step": 5, "accuracy": 0.80, "seconds": 3.0,
                       "mb": 50.0}]}
    pre = {"command": "prefix", "steps": 3, "first_step_s": 4.0,
           "s_per_step": 10.0, "share_metrics": 0.1, "skipped": 0}
    proj = wan.project(full, pre, 5)
    assert proj["projected"] == 3
    assert proj["train_s"] == pytest.approx(40.0)
    assert proj["curve"][1]["seconds"] == pytest.approx(4.0 + 4 * 10.0)
    assert full["curve"][1]["seconds"] == 3.0  # the full run is untouched
    fast = {"command": "other", "steps": 5, "first_step_s": 1.0,
            "s_per_step": 1.0, "train_s": 4.0, "share_metrics": 0.8,
            "skipped": 0, "final_accuracy": 0.81, "mb_per_node": 1.0,
            "curve": [{"step": 3, "accuracy": 0.796, "seconds": 5.5,
                       "mb": 0.5}]}
    links = [{"name": "1G/5ms"}, {"name": "10M/50ms"}]
    rec = {"nodes": [4], "links": links, "targets": {}, "runs": {"4": {
        "allreduce": {"1G/5ms": full, "10M/50ms": proj},
        "powergossip": {"10M/50ms": fast},
        "compute_only": {"10M/50ms": {"train_s": 8.0}}}}}
    wan.analyse(rec)
    assert rec["targets"]["4"] == pytest.approx(0.795)
    ar = rec["runs"]["4"]["allreduce"]["10M/50ms"]
    assert ar["to_target"]["step"] == 5  # 0.70 < 0.795 at step 3
    assert ar["to_target"]["seconds"] == pytest.approx(44.0)
    assert ar["share_wall"] == pytest.approx(8.0 / 40.0)
    pg = rec["runs"]["4"]["powergossip"]["10M/50ms"]
    assert pg["to_target"] == {"step": 3, "seconds": 5.5, "mb": 0.5}
    assert pg["sooner_than_allreduce"] == pytest.approx(44.0 / 5.5)
    assert pg["share_wall"] == pytest.approx(2.0)
    # measured on another CPU than its references: nothing compared, and
    # the figures of an earlier analysis go
    pg["cpu"] = "other"
    wan.analyse(rec)
    assert "share_wall" not in pg and "sooner_than_allreduce" not in pg
    assert pg["other_cpu"] and pg["other_cpu_sooner"]
    assert pg["to_target"]["seconds"] == 5.5


def test_analyse__ceilings__hand_computed():
    # 10 Mbit/s carries 25 MB in 20 s: a 5 s compute-only phase allows a
    # 25 % wall share. All-reduce reaches 0.795 at step 4 after 40 s; the
    # compute-only run is at step 4 after 8 s: 5x.
    ar = {"steps": 4, "train_s": 40.0, "share_metrics": 0.1,
          "final_accuracy": 0.80, "mb_per_node": 90.0, "mb_phase": 80.0,
          "curve": [{"step": 2, "accuracy": 0.5, "seconds": 20.0, "mb": 1},
                    {"step": 4, "accuracy": 0.80, "seconds": 40.0, "mb": 2}]}
    co = {"train_s": 5.0, "curve": [{"step": 2, "seconds": 3.0},
                                    {"step": 4, "seconds": 8.0}]}
    dl = {"train_s": 20.0, "share_metrics": 0.3, "final_accuracy": 0.80,
          "mb_per_node": 30.0, "mb_phase": 25.0,
          "curve": [{"step": 4, "accuracy": 0.80, "seconds": 10.0,
                     "mb": 25.0}]}
    rec = {"nodes": [4], "links": [{"name": "10M/50ms"}], "targets": {},
           "labels": {"allreduce": "all-reduce",
                      "diloco_overlap": "overlapped"},
           "runs": {"4": {"allreduce": {"10M/50ms": ar},
                          "diloco_overlap": {"10M/50ms": dl},
                          "compute_only": {"10M/50ms": co}}}}
    wan.analyse(rec)
    assert dl["share_ceiling"] == pytest.approx(0.25)
    assert ar["share_ceiling"] == pytest.approx(5.0 / 64.0)
    assert ar["sooner_ceiling"] == pytest.approx(5.0)
    assert ar["sooner_ceiling_step"] == 4
    # a link fast enough for the bytes caps nothing
    rec["links"] = [{"name": "1G/5ms"}]
    rec["runs"]["4"] = {k: {"1G/5ms": v["10M/50ms"]}
                        for k, v in rec["runs"]["4"].items()}
    wan.analyse(rec)
    assert dl["share_ceiling"] == 1.0
    # the ceilings need the bytes of the phase and the compute-only curve
    del dl["mb_phase"]
    co["curve"] = []
    wan.analyse(rec)
    assert "share_ceiling" not in dl and "sooner_ceiling" not in ar


def test_run_cpu__own_then_the_last_session_that_measured_it():
    rec = {"machine": {"cpu": "now"}, "parts": [
        {"nodes": [4], "configs": ["diloco"], "machine": {"cpu": "a"}},
        {"nodes": [4, 8], "configs": ["diloco"], "machine": {"cpu": "b"}},
        {"nodes": [4], "configs": ["dpsgd"], "machine": {"cpu": "c"}}]}
    assert wan.run_cpu(rec, 4, "diloco", {}) == "b"
    assert wan.run_cpu(rec, 8, "diloco", {"cpu": "own"}) == "own"
    assert wan.run_cpu(rec, 8, "dpsgd", {}) == "now"


def test_add_record__keeps_what_this_session_did_not_measure(tmp_path):
    links = [{"name": "100M/25ms"}]

    def rec(runs, nodes, date):
        return {"steps": 200, "period": 20, "links": links, "nodes": nodes,
                "runs": runs, "date": date, "machine": {}, "wall_s": 1.0,
                "command": "c", "features": {}}
    old = rec({"4": {"allreduce": {"100M/25ms": {"train_s": 1.0}},
                     "diloco": {"100M/25ms": {"error": "stopped"}}}},
              [4], "then")
    path = str(tmp_path / "wan.json")
    with open(path, "w") as f:
        json.dump(old, f)
    new = rec({"4": {"diloco": {"100M/25ms": {"train_s": 2.0}}},
               "8": {"diloco": {"100M/25ms": {"train_s": 3.0}}}}, [4, 8],
              "now")
    got = wan.add_record(new, path)
    assert got["runs"]["4"]["allreduce"]["100M/25ms"] == {"train_s": 1.0}
    assert got["runs"]["4"]["diloco"]["100M/25ms"] == {"train_s": 2.0}
    assert got["runs"]["8"]["diloco"]["100M/25ms"] == {"train_s": 3.0}
    assert got["nodes"] == [4, 8]
    assert [p["date"] for p in got["parts"]] == ["then", "now"]
    assert got["parts"][1]["configs"] == ["diloco"]
    assert got["parts"][0]["configs"] == ["allreduce", "diloco"]


def test_share_rounds__interleaved_runs__medians_hand_computed(monkeypatch):
    # Round 1 is the matrix's; rounds 2 and 3 run compute-only, then each
    # target's scheme measured in full at that link. Wall ratios 10/20,
    # 10/10, 10/12.5: median 0.8; metrics 0.9, 0.7, 0.8: median 0.8.
    order = []
    times = {"compute_only": [10.0, 10.0], "powergossip_stale": [10.0, 12.5]}

    def launch(rumor, work, tag, n, steps, link, args, eval_every, timeout):
        key = tag.split("-")[1]
        order.append((tag, args, eval_every))
        t = times[key].pop(0)
        return {"train_s": t, "share_metrics": {10.0: 0.7, 12.5: 0.8}.get(
            t) if key != "compute_only" else 1.0, "load": 0.5}
    monkeypatch.setattr(wan, "launch", launch)
    a = type("A", (), {"rounds": 3, "steps": 200, "timeout": 9})()
    links = [wan.parse_link("100M/25"), wan.parse_link("1G/5")]
    pg = {"train_s": 20.0, "share_metrics": 0.9}
    co = {"train_s": 10.0, "share_metrics": 1.0}
    projected = {"train_s": 5.0, "share_metrics": 0.5, "projected": 10}
    runs = {"powergossip_stale": {"100M/25ms": pg},
            "diloco_overlap": {"100M/25ms": projected},
            "compute_only": {"100M/25ms": co, "1G/5ms": dict(co)}}
    wan.share_rounds(a, "rumor", "/w", 4, runs, 20, links)
    assert [o[0] for o in order] == [
        "n4-compute_only-100M-round2", "n4-powergossip_stale-100M-round2",
        "n4-compute_only-100M-round3", "n4-powergossip_stale-100M-round3"]
    assert order[1][1][:2] == ["--algo", "powergossip"]
    assert order[0][1] == ["--algo", "localsgd", "--period", "200"]
    assert all(o[2] == 0 for o in order)  # timing runs do not evaluate
    assert "rounds" not in projected and "rounds" not in runs[
        "compute_only"]["1G/5ms"]
    rec = {"nodes": [4], "links": [{"name": "100M/25ms"}], "targets": {},
           "labels": {"powergossip_stale": "stale PowerGossip",
                      "diloco_overlap": "overlapped"},
           "runs": {"4": runs}}
    wan.analyse(rec)
    assert pg["share_wall_rounds"] == pytest.approx([0.5, 1.0, 0.8])
    assert pg["share_wall"] == pytest.approx(0.8)
    assert wan.metrics_share(pg) == pytest.approx(0.8)
    # a row without rounds: the compute-only rounds' median phase (10 s)
    assert projected["share_wall"] == pytest.approx(2.0)
    line = [x for x in wan.targets(rec) if "stale PowerGossip" in x][0]
    assert "80.0 % (not met) (metrics), 80.0 % (not met) (wall)" in line
    assert "medians of 3 rounds, wall 50.0 % / 100.0 % / 80.0 %" in line
    # stale PowerGossip's accuracy against its non-stale run's
    pg["final_accuracy"] = 0.836
    runs["powergossip"] = {"1G/5ms": {"final_accuracy": 0.84,
                                      "train_s": 20.0}}
    rec["labels"]["powergossip"] = "PowerGossip"
    line = [x for x in wan.targets(rec) if "accuracy within" in x]
    assert line == ["- 4 nodes, stale PowerGossip: final accuracy within "
                    "0.5 points of PowerGossip: -0.40 points (met)"]
    pg["final_accuracy"] = 0.8349
    assert "-0.51 points (not met)" in wan.targets(rec)[-1]
    # one round is no median: the ratio of the two runs
    del pg["share_wall_rounds"]
    pg["rounds"] = pg["rounds"][:1]
    runs["compute_only"]["100M/25ms"]["rounds"] = [{"train_s": 10.0}]
    wan.analyse(rec)
    assert pg["share_wall"] == pytest.approx(0.5)
    assert "share_wall_rounds" not in pg
