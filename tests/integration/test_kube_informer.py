#!/usr/bin/python3
"""Informers (src/kube/informer.c) against the API server stand-in, through
tests/tools/kubeinformer, which prints one line per handler call:

    ADD name rv | UPDATE name rv | DELETE name | SYNCED n | {stats JSON}

What a controller built on an informer relies on: the initial sync hands it
every object once and then says so; later changes arrive once each, in
order; a dropped watch resumes from the last resourceVersion without a new
LIST and without losing or repeating events; after the server compacted its
history (410 Gone) a relist hands over exactly what was missed, deletes
included; bookmarks keep the resume point fresh on a quiet watch; label
selectors are honoured as objects start and stop matching; and SIGTERM
stops it at once.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

SRC = os.environ.get("GPUOP_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("GPUOP_BUILD_DIR", os.path.join(SRC, "build"))
if os.environ.get("GPUOP"):
    BUILD = os.environ.get("GPUOP_BUILD_DIR", os.path.dirname(os.environ["GPUOP"]))
TOOL = os.path.join(BUILD, "tests", "tools", "kubeinformer")
sys.path.insert(0, os.path.join(SRC, "tests"))

from apiserver.fixture import ApiServer  # noqa: E402


class Informer:
    """A running kubeinformer and the lines it printed so far."""

    def __init__(self, api, *args):
        argv = [TOOL, "--kubeconfig", api.kubeconfig, "--stats"] + list(args)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.stderr = []
        self.cond = threading.Condition()
        self.t_out = threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True)
        self.t_err = threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr), daemon=True)
        self.t_out.start()
        self.t_err.start()

    def _read(self, f, into):
        for line in f:
            with self.cond:
                into.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait(self, pred, timeout=15, what="line"):
        """Waits until pred(lines) is true; returns the lines."""
        end = time.monotonic() + timeout
        with self.cond:
            while not pred(self.lines):
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not pred(self.lines)):
                    raise AssertionError("%s not seen within %ss; stdout:\n%s\nstderr:\n%s" % (
                        what, timeout, "\n".join(self.lines), "\n".join(self.stderr)))
                self.cond.wait(min(left, 0.2))
            return list(self.lines)

    def wait_line(self, line, timeout=15):
        return self.wait(lambda ls: line in ls, timeout, repr(line))

    def after_sync(self):
        with self.cond:
            i = next(i for i, l in enumerate(self.lines) if l.startswith("SYNCED "))
            return [l for l in self.lines[i + 1:] if not l.startswith("{")]

    def stop(self):
        """SIGTERM; returns (exit code, seconds to exit, stats)."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        elapsed = time.monotonic() - t0
        self.t_out.join(5)
        self.t_err.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()
        stats = [json.loads(l) for l in self.lines if l.startswith("{")]
        return rc, elapsed, (stats[-1] if stats else None)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.t_out.join(5)
        self.t_err.join(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if not f.closed:
                f.close()


def node(name, labels=None):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}}}


def rv(obj):
    return obj["metadata"]["resourceVersion"]


class InformerTest(unittest.TestCase):
    def start(self, api, *args):
        inf = Informer(api, *args)
        self.addCleanup(inf.kill)
        return inf

    def test_sync_then_events_in_order(self):
        with ApiServer(gpu_nodes=3) as api:
            listed = api.get("/api/v1/nodes")["items"]
            inf = self.start(api, "--resource", "nodes")
            lines = inf.wait_line("SYNCED 3")
            self.assertEqual(sorted(lines[:3]), sorted("ADD %s %s" % (n["metadata"]["name"], rv(n)) for n in listed))
            self.assertEqual(lines[3], "SYNCED 3")

            name = listed[0]["metadata"]["name"]
            a = api.create("/api/v1/nodes", node("extra-1"))
            b = api.patch("/api/v1/nodes/" + name, {"metadata": {"labels": {"gpuop.io/test": "1"}}})
            api.delete("/api/v1/nodes/extra-1")
            c = api.patch("/api/v1/nodes/" + name, {"metadata": {"labels": {"gpuop.io/test": "2"}}})
            want = ["ADD extra-1 %s" % rv(a), "UPDATE %s %s" % (name, rv(b)), "DELETE extra-1",
                    "UPDATE %s %s" % (name, rv(c))]
            inf.wait(lambda ls: len(inf.after_sync()) >= 4, what="four events")
            time.sleep(0.3)  # nothing more may follow
            self.assertEqual(inf.after_sync(), want)
            rc, elapsed, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertLess(elapsed, 1.0)
            self.assertEqual((stats["lists"], stats["relists"], stats["events"], stats["items"]), (1, 0, 4, 3))
            self.assertGreater(stats["pool_bytes"], 0)
            self.assertGreater(stats["rss_kib"], 0)

    def test_dropped_watch_resumes_without_relist(self):
        with ApiServer(gpu_nodes=2) as api:
            names = [n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"]]
            inf = self.start(api, "--resource", "nodes")
            inf.wait_line("SYNCED 2")
            want = []
            for i in range(3):
                api.wait_for(lambda: api.stats()["watches_open"] >= 1)
                self.assertGreaterEqual(api.drop_watches()["dropped"], 1)
                # Changes while the informer reconnects: each must arrive once.
                o = api.patch("/api/v1/nodes/" + names[0], {"metadata": {"labels": {"round": str(i)}}})
                want.append("UPDATE %s %s" % (names[0], rv(o)))
                o = api.create("/api/v1/nodes", node("late-%d" % i))
                want.append("ADD late-%d %s" % (i, rv(o)))
            inf.wait(lambda ls: len(inf.after_sync()) >= len(want), what="events after the drops")
            time.sleep(1.5)  # a bookmark interval: duplicates would show now
            self.assertEqual(inf.after_sync(), want)
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertGreaterEqual(stats["resumes"], 3)
            self.assertEqual(stats["lists"], 1)
            self.assertEqual(stats["relists"], 0)
            self.assertEqual(stats["items"], 5)

    def test_compaction_relists_and_hands_over_what_was_missed(self):
        with ApiServer(gpu_nodes=4) as api:
            names = sorted(n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"])
            inf = self.start(api, "--resource", "nodes")
            inf.wait_line("SYNCED 4")
            api.wait_for(lambda: api.stats()["watches_open"] >= 1)
            # Freeze the informer, end its watch, change things and forget
            # the history: its resume point is now older than the server's.
            inf.proc.send_signal(signal.SIGSTOP)
            try:
                api.drop_watches()
                api.wait_for(lambda: api.stats()["watches_open"] == 0)
                api.delete("/api/v1/nodes/" + names[0])
                u = api.patch("/api/v1/nodes/" + names[1], {"metadata": {"labels": {"changed": "yes"}}})
                a = api.create("/api/v1/nodes", node("new-1"))
                api.create("/api/v1/nodes", node("short-lived"))
                api.delete("/api/v1/nodes/short-lived")
                api.compact()
            finally:
                inf.proc.send_signal(signal.SIGCONT)
            want = {"DELETE " + names[0], "UPDATE %s %s" % (names[1], rv(u)), "ADD new-1 %s" % rv(a)}
            inf.wait(lambda ls: len(inf.after_sync()) >= 3, what="the relist's diff")
            # Keep changing things: the informer is watching again.
            b = api.create("/api/v1/nodes", node("after-1"))
            inf.wait_line("ADD after-1 %s" % rv(b))
            time.sleep(0.3)
            got = inf.after_sync()
            self.assertEqual(set(got[:3]), want)  # unchanged nodes: no UPDATE
            self.assertEqual(got[3:], ["ADD after-1 %s" % rv(b)])
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertGreaterEqual(stats["relists"], 1)
            self.assertEqual(stats["lists"], stats["relists"] + 1)
            self.assertEqual(stats["items"], 5)

    def test_compaction_during_a_live_watch(self):
        with ApiServer(gpu_nodes=2) as api:
            inf = self.start(api, "--resource", "nodes")
            inf.wait_line("SYNCED 2")
            for i in range(5):
                api.create("/api/v1/nodes", node("burst-%d" % i))
                if i == 2:
                    api.compact()
            # Whatever arrived by watch or by the relist: every node once.
            inf.wait(lambda ls: sum(1 for l in inf.after_sync() if l.startswith("ADD burst-")) >= 5,
                     what="five burst nodes")
            time.sleep(0.5)
            adds = [l.split()[1] for l in inf.after_sync() if l.startswith("ADD ")]
            self.assertEqual(sorted(adds), ["burst-%d" % i for i in range(5)])
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertGreaterEqual(stats["relists"], 1)
            self.assertEqual(stats["items"], 7)

    def test_bookmarks_advance_the_resume_point(self):
        with ApiServer(gpu_nodes=2) as api:
            inf = self.start(api, "--resource", "nodes")
            inf.wait_line("SYNCED 2")
            # Changes to other resources move the server's resourceVersion
            # on; only bookmarks tell a node watch about it.
            for i in range(3):
                api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": "bm-%d" % i}})
            time.sleep(2.5)  # bookmarks come every second
            inf.proc.send_signal(signal.SIGSTOP)
            try:
                api.drop_watches()
                api.wait_for(lambda: api.stats()["watches_open"] == 0)
                api.compact()  # history before now is gone
            finally:
                inf.proc.send_signal(signal.SIGCONT)
            a = api.create("/api/v1/nodes", node("after-bookmark"))
            inf.wait_line("ADD after-bookmark %s" % rv(a))
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            # Resumed from the bookmark's version, which the compaction kept.
            self.assertEqual(stats["relists"], 0)
            self.assertGreaterEqual(stats["resumes"], 1)

    def test_label_selector(self):
        with ApiServer(gpu_nodes=0) as api:
            api.create("/api/v1/nodes", node("gpu-a", {"pool": "gpu"}))
            api.create("/api/v1/nodes", node("cpu-a", {"pool": "cpu"}))
            inf = self.start(api, "--resource", "nodes", "--selector", "pool in (gpu,a100)")
            lines = inf.wait_line("SYNCED 1")
            self.assertTrue(lines[0].startswith("ADD gpu-a "), lines)
            o = api.patch("/api/v1/nodes/cpu-a", {"metadata": {"labels": {"pool": "a100"}}})
            inf.wait_line("ADD cpu-a %s" % rv(o))
            api.patch("/api/v1/nodes/gpu-a", {"metadata": {"labels": {"pool": "cpu"}}})
            inf.wait_line("DELETE gpu-a")
            api.create("/api/v1/nodes", node("cpu-b", {"pool": "cpu"}))
            api.delete("/api/v1/nodes/cpu-b")
            time.sleep(0.3)
            self.assertEqual([l.split()[0] + " " + l.split()[1] for l in inf.after_sync()],
                             ["ADD cpu-a", "DELETE gpu-a"])
            rc, _, stats = inf.stop()
            self.assertEqual((rc, stats["items"]), (0, 1))

    def test_pods_in_a_namespace(self):
        with ApiServer() as api:
            for ns in ("ml", "other"):
                api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-0", "labels": {"app": "t"}},
                   "spec": {"containers": [{"name": "c", "image": "busybox",
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            p0 = api.create("/api/v1/namespaces/ml/pods", pod)
            api.create("/api/v1/namespaces/other/pods", pod)
            inf = self.start(api, "--resource", "pods", "--namespace", "ml")
            lines = inf.wait_line("SYNCED 1")
            self.assertEqual(lines[0].split()[:2], ["ADD", "ml/train-0"])
            self.assertGreaterEqual(int(lines[0].split()[2]), int(rv(p0)))
            api.delete("/api/v1/namespaces/ml/pods/train-0")
            inf.wait_line("DELETE ml/train-0")
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertNotIn("other/train-0", " ".join(inf.lines))

    def test_errors_are_retried_not_fatal(self):
        with ApiServer(gpu_nodes=1) as api:
            # The first LISTs are refused, then the first watches fail.
            api.fault(verbs=["list"], resources=["nodes"], error_code=403, count=2)
            api.fault(verbs=["watch"], resources=["nodes"], error_code=403, count=2)
            t0 = time.monotonic()
            inf = self.start(api, "--resource", "nodes")
            inf.wait_line("SYNCED 1")
            self.assertLess(time.monotonic() - t0, 5)  # backoff starts at 200 ms
            a = api.create("/api/v1/nodes", node("x"))
            inf.wait_line("ADD x %s" % rv(a))
            self.assertTrue(any("list failed" in l for l in inf.stderr), inf.stderr)
            rc, _, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertEqual(stats["lists"], 1)
            self.assertGreaterEqual(stats["watches"], 3)

    def test_sigterm_while_the_server_is_unreachable(self):
        with ApiServer() as api:
            with open(api.kubeconfig) as f:
                kubeconfig = f.read()
        # The server is gone; the informer retries until told to stop.
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "kubeinformer-gone-%d.kubeconfig" % os.getpid())
        with open(path, "w") as f:
            f.write(kubeconfig)
        self.addCleanup(os.unlink, path)
        inf = self.start(type("Gone", (), {"kubeconfig": path}), "--resource", "nodes")
        # It fails, says so, and keeps trying.
        end = time.monotonic() + 20
        while not any("list failed" in l for l in inf.stderr) and time.monotonic() < end:
            time.sleep(0.1)
        self.assertTrue(any("list failed" in l for l in inf.stderr), inf.stderr)
        self.assertIsNone(inf.proc.poll())
        time.sleep(0.5)  # well inside the client's retry sleeps
        rc, elapsed, stats = inf.stop()
        self.assertEqual(rc, 0)
        # The stop switch reaches the LIST in flight: the client's retry
        # sleeps (up to 5 s each) are cut short, not waited out.  Exiting
        # takes ~40 ms even under ASan; 0.5 s leaves room for a loaded CI
        # machine.
        self.assertLess(elapsed, 0.5)
        self.assertEqual((stats["lists"], stats["items"]), (0, 0))

    def test_sigterm_during_a_list_the_server_answers_with_5xx(self):
        with ApiServer(gpu_nodes=1) as api:
            # Every LIST gets 503: the client sits in its retry loop.
            api.fault(verbs=["list"], resources=["nodes"], error_code=503, count=1000)
            inf = self.start(api, "--resource", "nodes")
            # After the 4th answer the client sleeps 0.6-1.8 s before the
            # next try: a stop that waited it out would take over 0.5 s,
            # while one that cuts it short takes ~40 ms (even under ASan).
            end = time.monotonic() + 15
            while api.stats()["faults_served"] < 4 and time.monotonic() < end:
                time.sleep(0.05)
            self.assertGreaterEqual(api.stats()["faults_served"], 4)
            rc, elapsed, stats = inf.stop()
            self.assertEqual(rc, 0)
            self.assertLess(elapsed, 0.5)
            self.assertEqual((stats["lists"], stats["items"]), (0, 0))

    def test_sigterm_during_a_list_the_server_is_slow_to_answer(self):
        with ApiServer(gpu_nodes=1) as api:
            # The server takes 20 s to answer a LIST: the transfer itself
            # is abandoned, not only the waits between attempts.
            api.fault(verbs=["list"], resources=["nodes"], latency_ms=20000, count=1)
            inf = self.start(api, "--resource", "nodes")
            end = time.monotonic() + 10
            while api.stats()["faults_served"] < 1 and time.monotonic() < end:
                time.sleep(0.05)
            time.sleep(0.2)
            rc, elapsed, stats = inf.stop()
            self.assertEqual(rc, 0)
            # Far below the 20 s the answer would take; loose, because a
            # loaded machine can delay any process exit.
            self.assertLess(elapsed, 3.0)
            self.assertEqual((stats["lists"], stats["items"]), (0, 0))

    def test_resync_timer(self):
        with ApiServer(gpu_nodes=2) as api:
            listed = api.get("/api/v1/nodes")["items"]
            inf = self.start(api, "--resource", "nodes", "--resync", "1")
            inf.wait_line("SYNCED 2")
            t0 = time.monotonic()
            want = ["RESYNC %s %s" % (n["metadata"]["name"], rv(n)) for n in listed]
            inf.wait(lambda ls: all(w in inf.after_sync() for w in want), what="a resync of every node")
            self.assertGreater(time.monotonic() - t0, 0.5)
            self.assertFalse([l for l in inf.after_sync() if not l.startswith("RESYNC ")])
            rc, _, stats = inf.stop()
            self.assertEqual((rc, stats["lists"], stats["events"]), (0, 1, 0))

    def test_for_seconds(self):
        with ApiServer(gpu_nodes=1) as api:
            t0 = time.monotonic()
            r = subprocess.run([TOOL, "--kubeconfig", api.kubeconfig, "--resource", "nodes", "--for", "1",
                                "--stats"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertLess(time.monotonic() - t0, 2.5)
            self.assertEqual(r.stdout.splitlines()[1], "SYNCED 1")
            self.assertEqual(json.loads(r.stdout.splitlines()[-1])["items"], 1)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed, failed))
    sys.exit(1 if failed else 0)
