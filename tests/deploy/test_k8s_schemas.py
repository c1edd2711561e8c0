"""deploy/k8s against the schemas that a cluster applies, offline.

* Every object of every file (and of the rendered kustomization) against the Kubernetes API
  schemas of current releases, strictly (an unknown or misspelt field fails, as
  `kubectl apply --validate=strict` would): kubernetes-validate ships them inside its wheel.
* The ServiceMonitor against the Prometheus Operator's CRD schema, vendored in
  tests/deploy/schemas/ (source and version in its `$comment`), with unknown fields refused too.
* The Deployment's probes, ports, uid and environment against what the image (Dockerfile) and
  `serve` (its real config loader, fed the ConfigMap and the Deployment's variables) use.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from packaging.version import Version

from tests.deploy.test_manifests import K8S, container, dockerfile, k8s_objects, load_all, pod_spec

SCHEMAS = Path(__file__).resolve().parent / "schemas"
SERVICEMONITOR_SCHEMA = SCHEMAS / "servicemonitor-v1-prometheus-operator-v0.93.0.json"
# The newest Kubernetes release the validator knows, and the two before it: the minor
# versions upstream still supports. A field removed or added in one of them shows here.
SUPPORTED_MINORS = 3


def kubernetes_versions() -> list[str]:
    versions = sorted({Version(v) for v in kubernetes_validate.utils.all_versions()})
    minors = sorted({(v.major, v.minor) for v in versions})[-SUPPORTED_MINORS:]
    return [str(max(v for v in versions if (v.major, v.minor) == m)) for m in minors]


def manifest_documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in load_all(path)
    ]


def is_custom(doc: dict[str, Any]) -> bool:
    return str(doc["apiVersion"]).startswith("monitoring.coreos.com/")


def validate_kubernetes(doc: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        where = "/".join(str(p) for p in err.path)
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        pytest.fail(f"{name} at {where!r} is invalid for Kubernetes {version}: {err.message}")


def test_the_validator_knows_a_current_release_offline() -> None:
    """The schemas come from the installed wheel: no network, and a recent release among them."""
    versions = kubernetes_versions()
    assert len(versions) == SUPPORTED_MINORS
    assert Version(versions[-1]) >= Version("1.33"), versions
    # a document that is wrong must fail, or the checks below prove nothing
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"ports": [{"port": "nine"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, versions[-1], strict=True)
    typo = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "dataa": {}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, versions[-1], strict=True)


@pytest.mark.parametrize("version", kubernetes_versions())
def test_every_manifest_matches_the_kubernetes_schemas(version: str) -> None:
    checked = 0
    for _, doc in manifest_documents():
        if is_custom(doc):
            continue
        validate_kubernetes(doc, version)
        checked += 1
    kinds = {doc["kind"] for _, doc in manifest_documents()}
    assert kinds >= {
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "Secret",
        "CronJob",
    }
    assert checked == len(manifest_documents()) - 1  # all but the ServiceMonitor


# --- the ServiceMonitor against the Prometheus Operator's CRD ------------------------------


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD's schema refusing unknown fields where the API server would prune them: an object
    with `properties` and no `x-kubernetes-preserve-unknown-fields` gets additionalProperties: false.
    (`kubectl apply` on a cluster rejects such fields under strict field validation.)"""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def servicemonitor_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())
    assert "prometheus-operator" in schema["$comment"] and "v0.93.0" in schema["$comment"]
    schema = strict({k: v for k, v in schema.items() if k != "$comment"})
    # metadata is checked by the API server's ObjectMeta, not by the CRD: use Kubernetes' own
    schema["properties"]["metadata"] = {"type": "object"}
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_servicemonitor_matches_the_prometheus_operator_crd() -> None:
    validator = servicemonitor_validator()
    (sm,) = [doc for _, doc in manifest_documents() if doc["kind"] == "ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(sm)]
    assert errors == []
    # its metadata is an ordinary ObjectMeta: check it with the Kubernetes schema of a ConfigMap
    meta_only = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": sm["metadata"]}
    validate_kubernetes(meta_only, kubernetes_versions()[-1])
    # and the schema does refuse what the operator would: a misspelt field, a bad duration
    for path, value in ((("spec", "endpoints", 0, "intervall"), "15s"), (("spec", "endpoints", 0, "interval"), "15")):
        broken = copy.deepcopy(sm)
        node: Any = broken
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        assert list(validator.iter_errors(broken)), f"{path}={value!r} should be refused"


# --- the kustomization, rendered -------------------------------------------------------------


def test_kustomization_renders_to_valid_objects() -> None:
    """`kubectl kustomize` (kustomize built into kubectl) renders deploy/k8s; each rendered object,
    labels added, is valid for the newest Kubernetes release."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomization is checked by structure only (test_manifests.py)")
    built = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    rendered = [d for d in yaml.safe_load_all(built.stdout) if d]
    listed = load_all(K8S / "kustomization.yaml")[0]["resources"]
    expected = sorted((d["kind"], d["metadata"]["name"]) for name in listed for d in load_all(K8S / name))
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == expected
    for doc in rendered:
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kustomize"
        validate_kubernetes(doc, kubernetes_versions()[-1])


# --- one source of truth: the Deployment against the image and `serve` -----------------------


def dockerfile_env() -> dict[str, str]:
    text = re.sub(r"\\\n", " ", (K8S.parents[1] / "Dockerfile").read_text())
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.upper().startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line[4:])))
    return env


def effective_serve_config(tmp_path: Path) -> Any:
    """What `serve` in the Deployment's pod runs with: its args, the ConfigMap's icetail.yaml at
    the mounted path, the Deployment's literal variables over the image's, read by serve's loader."""
    cli = pytest.importorskip("icetail.monitor.cli.main")
    from icetail.monitor.service.config import build_service_config

    objects = k8s_objects()
    dep = container(objects[("Deployment", "icetail")])
    mounts = {m["mountPath"]: m["name"] for m in dep["volumeMounts"]}
    args = list(dep["args"])
    config_path = Path(args[args.index("--config") + 1])
    assert mounts[str(config_path.parent)] == "config"
    local = tmp_path / config_path.name
    local.write_text(objects[("ConfigMap", "icetail-config")]["data"][config_path.name])
    args[args.index("--config") + 1] = str(local)
    secrets = {name: obj for (kind, name), obj in objects.items() if kind == "Secret"}
    from_secrets = {
        k: v for ref in dep.get("envFrom", []) for k, v in secrets[ref["secretRef"]["name"]]["stringData"].items()
    }
    environ = {**dockerfile_env(), **from_secrets, **{e["name"]: e["value"] for e in dep["env"] if "value" in e}}
    return build_service_config(cli.build_parser().parse_args(args), environ=environ)


def test_deployment_ports_and_probes_are_the_ones_serve_listens_on(tmp_path: Path) -> None:
    config = effective_serve_config(tmp_path)
    objects = k8s_objects()
    dep = objects[("Deployment", "icetail")]
    c = container(dep)
    assert config.metrics_host == "0.0.0.0", "the kubelet and Prometheus reach the pod IP, not loopback"
    (port,) = c["ports"]
    assert port["containerPort"] == config.metrics_port
    named = {port["name"]: port["containerPort"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert named.get(get["port"], get["port"]) == config.metrics_port, probe
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == config.metrics_port
    (svc_port,) = objects[("Service", "icetail")]["spec"]["ports"]
    assert named.get(svc_port["targetPort"], svc_port["targetPort"]) == config.metrics_port
    assert str(config.metrics_port) == dockerfile()["EXPOSE"]
    # the image's HEALTHCHECK reads ICETAIL_METRICS_PORT: the Deployment must set it to the same port
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["ICETAIL_METRICS_PORT"] == str(config.metrics_port)
    # the shutdown budget: the pod's grace period covers serve's own shutdown timeout
    grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > config.shutdown_timeout_seconds, (grace, config.shutdown_timeout_seconds)


def test_deployment_runs_as_the_image_user_with_its_writable_paths() -> None:
    uid, gid = (int(x) for x in dockerfile()["USER"].split(":"))
    volumes = json.loads(dockerfile()["VOLUME"])
    image_env = dockerfile_env()
    for key in (("Deployment", "icetail"), ("CronJob", "icetail-batch")):
        obj = k8s_objects()[key]
        spec, c = pod_spec(obj), container(obj)
        sc = spec["securityContext"]
        assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (uid, gid, gid), key
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        for path in volumes:  # every path the image declares writable is a writable mount
            assert path in mounts and not mounts[path].get("readOnly"), (key, path)
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        for name in ("PYICEBERG_HOME",):
            assert env.get(name, image_env[name]) == image_env[name], (key, name)
        assert image_env["HOME"] in mounts, "HOME must be writable under readOnlyRootFilesystem"
        assert "/etc/icetail" in mounts and mounts["/etc/icetail"].get("readOnly") is True
