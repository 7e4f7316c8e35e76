"""Kubernetes export: a scenario as manifests — ``edgebed export k8s SCENARIO -o DIR``.

Untested on a live cluster (none can run where edgebed is developed); the manifests are validated
offline against the Kubernetes schema in the tests (``kubernetes-validate``). Written to ``DIR``::

    ps.yaml              ConfigMap (scenario.yaml, crash schedule), PS Deployment, PS Service
    class-<name>.yaml    per speed class: a headless Service and a StatefulSet, one pod per device
    kustomization.yaml   the list above (kubectl apply -k DIR)

The PS runs ``edgebed compose serve`` (the engine with agents started by someone else: here the
StatefulSets), binds 5555 and writes its run directory to an ``emptyDir`` volume (copy it out with
``kubectl cp`` before deleting the pod). Each device pod's ``shape`` init container (NET_ADMIN) shapes
the pod's ``eth0``: tbf on egress (uplink), an ifb device with tbf on ingress (downlink); the qdiscs
stay in the pod's network namespace, which the agent container shares. Its device number is the
class's first device plus the pod's ordinal. CPU limits per speed class as on docker. Crashes are
drawn by the PS (``failures.crash_probability``, seeded) and enforced by its protocol: a crashed
device's messages are refused and it stops contributing (the pod itself keeps running).
"""
from __future__ import annotations

from pathlib import Path

import yaml

from ...scenario import Scenario, class_assignment
from .docker.compose import IMAGE, PS_PORT, RUNS_IN_CONTAINER, SCENARIO_IN_CONTAINER
from .docker.runtime import DockerSpec, cpus_for

LABEL = "edgebed.io/scenario"


def _name(s: str) -> str:
    """A DNS-1123 label from ``s``."""
    out = "".join(c if c.isalnum() else "-" for c in s.lower()).strip("-")
    return out[:40] or "x"


def manifests(sc: Scenario, image: str = IMAGE) -> dict[str, list[dict]]:
    """File name → the Kubernetes objects it holds."""
    dspec = DockerSpec.model_validate(sc.runtime.docker or {})
    app = _name(sc.name)
    labels = {LABEL: app}
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "OMP_NUM_THREADS", "value": "1"}]
    scenario_yaml = yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True, context={"units": "write"}), sort_keys=False)
    sched = sc.crash_schedule()   # failures.crash: the devices and points the PS will crash
    crash = {"crash_probability": sc.failures.crash_probability, "seed": sc.seed,
             **({"schedule": {"unit": sched.unit, "devices": {d: p for d, p in sorted(sched.at.items())}}}
                if sched is not None else {}),
             "enforced_by": "the PS protocol: a crashed device's messages are refused from then on; its pod "
                            "keeps running and contributes nothing",
             "lost_after_s": sc.failures.lost_after}
    ps_name = f"{app}-ps"
    files: dict[str, list[dict]] = {"ps.yaml": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{app}-scenario", "labels": labels},
         "data": {"scenario.yaml": scenario_yaml, "crashes.yaml": yaml.safe_dump(crash, sort_keys=False)}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ps_name, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": {**labels, "edgebed.io/role": "ps"}},
                  "template": {"metadata": {"labels": {**labels, "edgebed.io/role": "ps"}}, "spec": {
                      "restartPolicy": "Always",
                      "containers": [{
                          "name": "ps", "image": image, "imagePullPolicy": "IfNotPresent",
                          "command": ["python", "-m", "edgebed.cli", "compose", "serve", SCENARIO_IN_CONTAINER,
                                      "--bind", f"tcp://0.0.0.0:{PS_PORT}", "--out", RUNS_IN_CONTAINER],
                          "ports": [{"containerPort": PS_PORT, "name": "zmq"}], "env": env,
                          "volumeMounts": [{"name": "scenario", "mountPath": str(Path(SCENARIO_IN_CONTAINER).parent)
                                            + "/scenario.yaml", "subPath": "scenario.yaml", "readOnly": True},
                                           {"name": "runs", "mountPath": RUNS_IN_CONTAINER}]}],
                      "volumes": [{"name": "scenario", "configMap": {"name": f"{app}-scenario"}},
                                  {"name": "runs", "emptyDir": {}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": ps_name, "labels": labels},
         "spec": {"selector": {**labels, "edgebed.io/role": "ps"},
                  "ports": [{"name": "zmq", "port": PS_PORT, "targetPort": PS_PORT}]}},
    ]}
    assign = class_assignment(sc)
    for idx, klass in enumerate(sc.workers.classes):
        devices = [d for d in range(sc.workers.n) if assign[d] == idx]
        if not devices:
            continue
        name = f"{app}-{_name(klass.name)}"
        sel = {**labels, "edgebed.io/class": _name(klass.name)}
        cpus = cpus_for(klass, dspec, paced=sc.timing.pacing)
        limits = {"cpu": f"{int(round(cpus * 1000))}m", **({"memory": dspec.memory.upper().rstrip("B") + "i"}
                                                             if dspec.memory else {})}
        agent = (f"exec python -m edgebed.device_agent --ps tcp://{ps_name}:{PS_PORT} "
                 f"--device $(( {devices[0]} + ${{POD_NAME##*-}} ))")
        pod_env = [*env, {"name": "EDGEBED_CLASS", "value": klass.name},
                   {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        spec: dict = {"restartPolicy": "Always", "containers": [{
            "name": "agent", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", agent],
            "env": pod_env, "resources": {"limits": limits}}]}
        shape = ["python", "-m", "edgebed.emulator.runtimes.docker.links", "shape", "--dev", "eth0"]
        for flag, link in (("--rate", klass.uplink), ("--down-rate", klass.downlink)):
            if link.rate is not None:
                shape += [flag, f"{link.rate:.0f}"]
        if len(shape) > 6:
            spec["initContainers"] = [{"name": "shape", "image": image, "imagePullPolicy": "IfNotPresent",
                                       "command": shape, "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]
        files[f"class-{_name(klass.name)}.yaml"] = [
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
             "spec": {"clusterIP": "None", "selector": sel}},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
                "name": name, "labels": labels,
                "annotations": {"edgebed.io/devices": f"{devices[0]}-{devices[-1]}",
                                "edgebed.io/link": f"uplink {klass.uplink.rate or 'unshaped'} bit/s, downlink "
                                                   f"{klass.downlink.rate or 'unshaped'} bit/s (tbf)"}},
             "spec": {"serviceName": name, "replicas": len(devices), "podManagementPolicy": "Parallel",
                      "selector": {"matchLabels": sel},
                      "template": {"metadata": {"labels": sel}, "spec": spec}}},
        ]
    files["kustomization.yaml"] = [{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                    "resources": sorted(f for f in files)}]
    return files


def export(sc: Scenario, out_dir: str | Path, image: str = IMAGE) -> list[Path]:
    """Write the manifests of ``sc`` into ``out_dir``; returns the files written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    head = (f"# Generated by edgebed from scenario {sc.name!r} ({sc.workers.n} devices). Untested on a live "
            "cluster; validated offline against the Kubernetes schema.\n")
    written = []
    for fname, objs in manifests(sc, image).items():
        p = out / fname
        p.write_text(head + yaml.safe_dump_all(objs, sort_keys=False, width=120))
        written.append(p)
    return written
