#!/usr/bin/env python3
"""What the schemas cannot say about deploy/k8s, checked offline
(validate.sh runs it; python3 with PyYAML, which the validator brings):

- store replicas: required pod anti-affinity per node, and a topology
  spread constraint over zones;
- NetworkPolicies: every seqsvr pod is selected, and a rule open to
  anyone (no `from`) admits client planes only;
- metrics: not on 9100 (node exporter's port by convention); the
  prometheus.io/port annotation, the `metrics` container port and each
  config's metrics_addr agree;
- logs: SEQSVR_LOG_FORMAT=json in every seqsvr container;
- AllocSvrs: a preStop hook that drains the AllocSvr itself with what
  the image holds (`seqsvr alloc drain --self`), waiting less than the
  grace period.

  python3 deploy/k8s/check.py [DIR]
"""
import pathlib
import re
import sys

import yaml

CLIENT_PORTS = {"store": {7111}, "alloc": {7201}}


def load(d):
    docs = []
    for f in sorted(pathlib.Path(d).glob("*.yaml")):
        if f.name == "kustomization.yaml":
            continue
        docs += [x for x in yaml.safe_load_all(f.read_text()) if x]
    return docs


def component(doc):
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def check_pre_stop(spec):
    """The AllocSvr's preStop hook: `seqsvr alloc drain --self`, its wait
    (--wait-secs) shorter than the grace period by at least 5 s."""
    container = spec["containers"][0]
    hook = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if hook[:3] != ["seqsvr", "alloc", "drain"] or "--self" not in hook:
        return [f"alloc: the preStop hook is not `seqsvr alloc drain --self`: {hook}"]
    wait = 25
    if "--wait-secs" in hook:
        i = hook.index("--wait-secs")
        wait = int(hook[i + 1]) if i + 1 < len(hook) and hook[i + 1].isdigit() else None
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if wait is None or wait + 5 > grace:
        return [f"alloc: the preStop hook waits {wait} s, the grace period is {grace} s"]
    return []


def check(docs):
    errors = []
    sts = {component(d): d for d in docs if d["kind"] == "StatefulSet"}
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    configs = {component(d): d for d in docs if d["kind"] == "ConfigMap"}
    for comp in ("store", "alloc"):
        if comp not in sts:
            errors.append(f"no {comp} StatefulSet")
            continue
        pod = sts[comp]["spec"]["template"]
        spec = pod["spec"]
        if comp == "store":
            req = (spec.get("affinity", {}).get("podAntiAffinity", {})
                   .get("requiredDuringSchedulingIgnoredDuringExecution", []))
            if not any(t.get("topologyKey") == "kubernetes.io/hostname" for t in req):
                errors.append("store: anti-affinity per node is not required")
            spread = spec.get("topologySpreadConstraints", [])
            if not any(c.get("topologyKey") == "topology.kubernetes.io/zone" for c in spread):
                errors.append("store: no topology spread constraint over zones")
        if comp == "alloc":
            errors += check_pre_stop(spec)
        # Metrics port: annotation, container port, configs.
        ann = pod["metadata"].get("annotations", {}).get("prometheus.io/port")
        container = spec["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
        if ann is None or "metrics" not in ports or int(ann) != ports["metrics"]:
            errors.append(f"{comp}: prometheus.io/port {ann} is not the metrics port {ports.get('metrics')}")
        if ports.get("metrics") == 9100 or ann == "9100":
            errors.append(f"{comp}: metrics on 9100 (node exporter's port)")
        for name, text in configs.get(comp, {}).get("data", {}).items():
            m = re.search(r'^metrics_addr\s*=\s*"[^"]*:(\d+)"', text, re.M)
            if not m or int(m.group(1)) != ports.get("metrics"):
                errors.append(f"{comp}: {name} metrics_addr is not on the metrics port")
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if env.get("SEQSVR_LOG_FORMAT") != "json":
            errors.append(f"{comp}: logs are not JSON (SEQSVR_LOG_FORMAT)")
        # NetworkPolicy.
        labels = pod["metadata"]["labels"]
        mine = [p for p in policies
                if all(labels.get(k) == v for k, v in
                       p["spec"]["podSelector"].get("matchLabels", {}).items())]
        if not mine:
            errors.append(f"{comp}: no NetworkPolicy selects its pods")
        for p in mine:
            if "Ingress" not in p["spec"].get("policyTypes", []):
                errors.append(f"{comp}: {p['metadata']['name']} does not restrict ingress")
            for rule in p["spec"].get("ingress", []):
                ports = {x.get("port") for x in rule.get("ports", [])}
                if not rule.get("from") and (not ports or not ports <= CLIENT_PORTS[comp]):
                    errors.append(f"{comp}: {p['metadata']['name']} lets anyone reach ports {sorted(ports) or 'all'}")
    for d in docs:
        if d["kind"] == "Service":
            for p in d["spec"].get("ports", []):
                if p.get("port") == 9100:
                    errors.append(f"service {d['metadata']['name']}: port 9100")
    return errors


def main():
    here = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent)
    errors = check(load(here))
    for e in errors:
        print(f"check.py: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print("check.py: anti-affinity, zone spread, network policies, metrics port, JSON logs, preStop drain: ok")


if __name__ == "__main__":
    main()
