"""Kubernetes export: manifests validate offline against the Kubernetes schema and say what the
scenario says (a StatefulSet per speed class sized to its devices, a NET_ADMIN init container shaping
each pod's link at the class's rates, CPU limits per class, the PS Service agents connect to)."""
import kubernetes_validate as kv
import pytest
import yaml

from edgebed.cli import main
from edgebed.emulator.runtimes import kubernetes
from edgebed.scenario import parse_scenario

K8S_VERSION = "1.30.0"


def scenario():
    return parse_scenario({
        "name": "k8s_demo", "seed": 7,
        "workers": {"n": 10, "classes": [
            {"name": "fast", "share": 0.3, "uplink": {"rate": "8mbit"}, "downlink": {"rate": "20mbit"}},
            {"name": "Slow_IoT", "share": 0.7, "slowdown": 4, "uplink": {"rate": "1mbit", "delay": "20ms"}}]},
        "failures": {"crash_probability": 0.01},
        "stop": {"updates": 100},
        "runtime": {"name": "docker", "docker": {"memory": "512m"}}})


def test_exported_manifests_validate_and_follow_the_scenario(tmp_path):
    assert main(["export", "k8s", "-o", str(tmp_path), "--image", "registry.example/edgebed:1"]
                + [str(_write(tmp_path / "in.yaml"))]) == 0
    objs = {}
    for f in sorted(tmp_path.glob("*.yaml")):
        if f.name in ("in.yaml", "kustomization.yaml"):
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            kv.validate(doc, K8S_VERSION, strict=True)      # raises on any schema violation
            objs[(doc["kind"], doc["metadata"]["name"])] = doc
    kust = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == ["class-fast.yaml", "class-slow-iot.yaml", "ps.yaml"]

    sets = {name: o for (kind, name), o in objs.items() if kind == "StatefulSet"}
    assert {n: s["spec"]["replicas"] for n, s in sets.items()} == {"k8s-demo-fast": 3, "k8s-demo-slow-iot": 7}
    fast = sets["k8s-demo-fast"]["spec"]["template"]["spec"]
    init = fast["initContainers"][0]
    assert init["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert init["command"][-4:] == ["--rate", "8000000", "--down-rate", "20000000"]
    assert fast["containers"][0]["resources"]["limits"] == {"cpu": "1000m", "memory": "512Mi"}
    slow = sets["k8s-demo-slow-iot"]["spec"]["template"]["spec"]
    assert slow["initContainers"][0]["command"][-2:] == ["--rate", "1000000"]
    assert slow["containers"][0]["resources"]["limits"]["cpu"] == "250m"     # base 1 CPU / slowdown 4
    # device numbers: the class's first device plus the pod's ordinal (fast 0-2, slow 3-9)
    assert "$(( 3 + ${POD_NAME##*-} ))" in slow["containers"][0]["command"][2]
    assert "tcp://k8s-demo-ps:5555" in slow["containers"][0]["command"][2]
    assert objs[("Service", "k8s-demo-ps")]["spec"]["ports"][0]["port"] == 5555
    crashes = yaml.safe_load(objs[("ConfigMap", "k8s-demo-scenario")]["data"]["crashes.yaml"])
    assert crashes["crash_probability"] == 0.01 and crashes["seed"] == 7
    ps_cmd = objs[("Deployment", "k8s-demo-ps")]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert ps_cmd[3:5] == ["compose", "serve"]


def test_a_broken_manifest_is_refused_by_the_validator():
    """The validation above means something: the same schema rejects a StatefulSet without selector."""
    sts = next(o for o in kubernetes.manifests(scenario())["class-fast.yaml"] if o["kind"] == "StatefulSet")
    del sts["spec"]["selector"]
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, K8S_VERSION, strict=True)


def _write(path):
    path.write_text(yaml.safe_dump(scenario().model_dump(mode="json", exclude_unset=True,
                                                          context={"units": "write"})))
    return path
