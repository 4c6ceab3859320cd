"""The deploy files, checked without a docker engine or a cluster: each against its own tool or
schema (hadolint, shellcheck, the Compose Specification schema, the Kubernetes OpenAPI schemas,
systemd-analyze, promtool), then against each other and against the code (ports, paths, the
uid, the metric names, the config keys: whatever one file names, the other must provide)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from kraftsim.cli.container import DIRS, properties_from_env
from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.metrics import ControllerMetrics
from kraftsim.metadata.files import parse_java_properties

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    assert found, f"{name} is a test dependency (pip install -e '.[test]')"
    return found


def _yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _props(path: Path) -> dict[str, str]:
    return parse_java_properties(path.read_text("latin-1"))


IMAGE_DEFAULTS = _props(DEPLOY / "docker" / "server.properties")


def _image_config(env: dict[str, str]) -> Config:
    """What the entrypoint makes of this environment, checked as the controller checks it."""
    return Config({**IMAGE_DEFAULTS, **properties_from_env(env)})


def _port(hostport: str) -> int:
    return int(hostport.rsplit(":", 1)[1])


# -- Dockerfile and entrypoint ------------------------------------------------------------

def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and not buf:
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        full = (buf + line).strip()
        buf = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_passes_hadolint() -> None:
    r = subprocess.run([_tool("hadolint"), "--no-color", str(REPO / "Dockerfile")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_catches_what_it_should() -> None:
    # The linter is live: a root image with an unpinned apt install fails it.
    r = subprocess.run([_tool("hadolint"), "--no-color", "-"], input="FROM debian\nRUN apt-get install curl\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "DL3008" in r.stdout


def test_entrypoint_passes_shellcheck() -> None:
    script = DEPLOY / "docker" / "entrypoint.sh"
    r = subprocess.run([_tool("shellcheck"), "--severity=style", str(script)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.access(script, os.X_OK), "COPY keeps the mode: the entrypoint must be executable in the checkout"


def test_dockerfile_structure_matches_the_entrypoint_and_defaults() -> None:
    ins = _instructions(REPO / "Dockerfile")
    names = [i for i, _ in ins]
    assert names.count("FROM") >= 2, "multi-stage"
    final = ins[len(ins) - 1 - names[::-1].index("FROM"):]
    assert "slim" in final[0][1] or "slim" in " ".join(a for i, a in ins if i == "ARG")
    args = {i: a for i, a in final}
    user = args["USER"].split(":")[0]
    assert user not in ("root", "0"), "the runtime stage runs as a non-root user"
    assert re.search(rf"--uid {user}\b", args["RUN"]), "USER is the uid the RUN step creates"
    assert json.loads(args["VOLUME"]) == [IMAGE_DEFAULTS["log.dirs"]]
    exposed = {int(p) for p in args["EXPOSE"].split()}
    listener_port = _port(IMAGE_DEFAULTS["listeners"].split("//")[1])
    assert exposed == {listener_port, _port(IMAGE_DEFAULTS["kraftsim.http.listen"])}
    health = args["HEALTHCHECK"]
    assert '"kraftsim.cli.container", "healthcheck"' in health
    assert args["STOPSIGNAL"] == "SIGTERM"
    entry = json.loads(args["ENTRYPOINT"])
    copies = [a.split() for i, a in final if i == "COPY" and not a.startswith("--from")]
    dests = {dst: src for src, dst in copies}
    assert dests[entry[0]] == "deploy/docker/entrypoint.sh"
    defaults_dir = DIRS["KRAFTSIM_DEFAULT_CONFIG_DIR"]
    assert dests[f"{defaults_dir}/server.properties"] == "deploy/docker/server.properties"
    for src, _ in copies:
        assert (REPO / src).exists(), src
    assert any(i == "COPY" and a.startswith("--from=build") for i, a in final), "the venv comes from the build stage"


def test_dockerignore_lets_every_package_folder_into_the_build() -> None:
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*", "an allow-list: everything out, then what the build needs"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    needed = {"pyproject.toml", "README.md", "deploy/docker", "kraftsim"}
    for link in (REPO / "kraftsim").iterdir():
        if link.is_symlink():
            needed.add(os.readlink(link).removeprefix("../").rstrip("/"))
    for top in REPO.iterdir():  # a top-level import name of its own, like pyspark_kraft/
        if top.is_dir() and (top / "__init__.py").exists() and top.name not in ("tests", "benchmarks"):
            needed.add(top.name)
    assert needed <= allowed, f"add to .dockerignore: {sorted(needed - allowed)}"


# -- compose ---------------------------------------------------------------------------------

def _interpolate(value: Any) -> Any:
    """Compose's ${NAME:-default} with nothing set: every default."""
    if isinstance(value, str):
        return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    if isinstance(value, list):
        return [_interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: _interpolate(v) for k, v in value.items()}
    return value


COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
COMPOSE_SCHEMA = json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text())


def test_compose_file_is_valid_compose() -> None:
    jsonschema.Draft7Validator(COMPOSE_SCHEMA).validate(COMPOSE)
    broken = copy.deepcopy(COMPOSE)
    broken["services"]["controller"]["helthcheck"] = broken["services"]["controller"].pop("healthcheck")
    with pytest.raises(jsonschema.ValidationError):  # and the schema is strict enough to catch a typo
        jsonschema.Draft7Validator(COMPOSE_SCHEMA).validate(broken)


def test_compose_services_fit_together() -> None:
    c = _interpolate(COMPOSE)
    services = c["services"]
    assert {"controller", "brokers", "zookeeper", "prometheus", "grafana"} <= set(services)
    ctl = services["controller"]
    cfg = _image_config({k: str(v) for k, v in ctl["environment"].items()})
    assert cfg.node_id == 3000 and cfg.get("process.roles") == ["controller"]
    (voter_id, voter_host, voter_port), = cfg.get("controller.quorum.voters")
    _, _, listener_port = cfg.controller_listener
    assert (voter_id, voter_host, voter_port) == (cfg.node_id, "controller", listener_port)
    http_port = cfg.get("kraftsim.http.listen")[1]
    assert {f"{listener_port}:{listener_port}", f"{http_port}:{http_port}"} <= set(ctl["ports"])
    assert any(v.endswith(f":{cfg.log_dirs[0]}") for v in ctl["volumes"]), "the data dir is on a volume"
    assert ctl["environment"]["CLUSTER_ID"]

    brokers = services["brokers"]
    assert brokers["image"] == ctl["image"]
    cmd = brokers["command"]
    assert cmd[:2] == ["kraftsim", "brokers"]
    assert cmd[cmd.index("--bootstrap-controller") + 1] == f"controller:{listener_port}"
    assert int(cmd[cmd.index("--count") + 1]) >= 1
    assert brokers["depends_on"]["controller"]["condition"] == "service_healthy"

    zk = services["zookeeper"]
    assert zk["profiles"] == ["zookeeper"], "ZooKeeper only on request"
    assert cfg.get("zookeeper.connect").split(":")[0] == "zookeeper"
    assert cfg.get("zookeeper.metadata.migration.enable") is False, "off unless ZK_MIGRATION=true"
    assert _image_config({"KAFKA_ZOOKEEPER_METADATA_MIGRATION_ENABLE": "true",
                          **{k: str(v) for k, v in ctl["environment"].items()
                             if k != "KAFKA_ZOOKEEPER_METADATA_MIGRATION_ENABLE"}})

    # Prometheus scrapes the controller's HTTP port; Grafana reads Prometheus and the dashboard.
    for service in ("prometheus", "grafana"):
        for volume in services[service]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), volume
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    assert targets == [f"controller:{http_port}"]
    assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in services["prometheus"]["volumes"]
    ds = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert source["jsonData"]["timeInterval"] == prom["global"]["scrape_interval"]
    boards = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "kraftsim.yaml").read_text())
    (provider,) = boards["providers"]
    mounts = dict(v.rsplit(":", 2)[:2] for v in services["grafana"]["volumes"] if v.startswith("./"))
    assert mounts["./grafana/kraftsim.json"] == provider["options"]["path"] + "/kraftsim.json"
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"


# -- Kubernetes ------------------------------------------------------------------------------

K8S_DOCS = [d for f in ("service.yaml", "statefulset.yaml") for d in _yaml_docs(DEPLOY / "k8s" / f)]


def test_kubernetes_manifests_are_valid() -> None:
    version = kubernetes_validate.latest_version()
    for doc in K8S_DOCS:
        kubernetes_validate.validate(doc, version, strict=True)
    broken = copy.deepcopy(next(d for d in K8S_DOCS if d["kind"] == "StatefulSet"))
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)
    kust = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    assert kust["kind"] == "Kustomization"
    assert all((DEPLOY / "k8s" / r).is_file() for r in kust["resources"])
    assert {i["name"] for i in kust["images"]} == {"kraftsim"}


def test_kubernetes_statefulset_fits_its_services_and_the_image() -> None:
    sts = next(d for d in K8S_DOCS if d["kind"] == "StatefulSet")
    services = {d["metadata"]["name"]: d for d in K8S_DOCS if d["kind"] == "Service"}
    spec = sts["spec"]
    pod = spec["template"]
    labels = pod["metadata"]["labels"]
    assert spec["replicas"] == 1, "kraftsim is a single-voter quorum"
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    headless = services[spec["serviceName"]]
    assert headless["spec"]["clusterIP"] == "None"
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for svc in services.values():
        assert svc["spec"]["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= set(ports)

    env = {e["name"]: e["value"] for e in container["env"]}
    cfg = _image_config(env)
    (voter_id, voter_host, voter_port), = cfg.get("controller.quorum.voters")
    assert voter_id == cfg.node_id
    assert voter_host == f"{sts['metadata']['name']}-0.{spec['serviceName']}"
    assert ports["controller"] == voter_port == cfg.controller_listener[2]
    assert ports["http"] == cfg.get("kraftsim.http.listen")[1]
    assert pod["spec"]["enableServiceLinks"] is False, "service links would inject KRAFTSIM_* variables"

    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    notes = pod["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == ports["http"] and notes["prometheus.io/path"] == "/metrics"

    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    assert mounts[claims.pop()] == str(cfg.log_dirs[0]) and not claims
    assert mounts["config"] == DIRS["KRAFTSIM_CONFIG_DIR"], "read-only root: the written config needs a volume"
    user = next(a for i, a in reversed(_instructions(REPO / "Dockerfile")) if i == "USER").split(":")[0]
    sec = pod["spec"]["securityContext"]
    assert str(sec["runAsUser"]) == user and sec["runAsNonRoot"] is True


# -- systemd ---------------------------------------------------------------------------------

def _unit() -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / "kraftsim.service").read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            current.setdefault(key, []).append(value)
    return sections


def test_systemd_unit_runs_format_then_the_controller() -> None:
    svc = _unit()["Service"]
    config = "/etc/kraftsim/server.properties"
    kraftsim = "/opt/kraftsim/venv/bin/kraftsim"
    assert svc["ExecStartPre"] == [f"{kraftsim} format --ignore-formatted -t ${{CLUSTER_ID}} -c {config}"]
    assert svc["ExecStart"] == [f"{kraftsim} controller {config}"]
    assert svc["KillSignal"] == ["SIGTERM"] and svc["Restart"] == ["on-failure"]
    assert svc["User"] != ["root"]
    cfg = Config(_props(DEPLOY / "systemd" / "server.properties"))
    assert cfg.log_dirs[0].is_relative_to(Path("/var/lib") / svc["StateDirectory"][0]), \
        "ProtectSystem=strict: the data dir must be the writable StateDirectory"


def test_systemd_unit_passes_systemd_analyze(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that ExecStart's binary exists: point it at this venv's kraftsim.
    text = (DEPLOY / "systemd" / "kraftsim.service").read_text()
    unit = tmp_path / "kraftsim.service"
    unit.write_text(text.replace("/opt/kraftsim/venv/bin/kraftsim", str(BIN / "kraftsim")))
    r = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


# -- Prometheus and Grafana ------------------------------------------------------------------

def test_prometheus_config_passes_promtool() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian package prometheus) is not installed; .ci/install-system-deps installs it as root")
    r = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


DASHBOARD = json.loads((DEPLOY / "grafana" / "kraftsim.json").read_text())
PANELS = [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def _exported_names() -> set[str]:
    text = ControllerMetrics(lambda: {}).render().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def test_dashboard_is_well_formed() -> None:
    assert DASHBOARD["uid"] and DASHBOARD["title"] and DASHBOARD["schemaVersion"] >= 36
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in DASHBOARD["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"{p['title']} overlaps another panel"
        cells |= area
    for p in PANELS:
        assert p["type"] in ("stat", "timeseries"), p["type"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var in variables or var == "__rate_interval", var


def test_dashboard_covers_the_controller_metrics_over_exported_names() -> None:
    exported = _exported_names()
    used: set[str] = set()
    for p in PANELS:
        for t in p["targets"]:
            for name in re.findall(r"kafka_controller_\w+", t["expr"]):
                assert name in exported, f"{p['title']}: {name} is not exported by controller/metrics.py"
                used.add(name)
    k, e = "kafka_controller_kafkacontroller_", "kafka_controller_controllereventmanager_"
    wanted = [k + "activecontrollercount", k + "activebrokercount", k + "fencedbrokercount",
              k + "offlinepartitionscount", e + "eventqueuetimems_bucket", e + "eventqueueprocessingtimems_bucket",
              k + "lastappliedrecordoffset", k + "lastcommittedrecordoffset", k + "timedoutbrokerheartbeatcount",
              k + "zkmigrationstate"]
    assert not [w for w in wanted if w not in used]
    lag = [t["expr"] for p in PANELS for t in p["targets"] if "lastappliedrecordoffset" in t["expr"]
           and "lastcommittedrecordoffset" in t["expr"]]
    assert lag, "a commit-lag panel (applied minus committed)"
