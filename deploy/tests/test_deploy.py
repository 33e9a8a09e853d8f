"""Checks of the deployment files: terraform/, deploy/systemd/, deploy/container/.

Run by scripts/deploy-checks.sh (a venv with python-hcl2, PyYAML and pytest). No cloud
account, no Docker and no Terraform are needed; where `terraform` or `systemd-analyze` exist,
they are used as a second opinion (template rendering, formatting, unit verification).
"""

import base64
import grp
import gzip
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import tomllib
from functools import lru_cache
from pathlib import Path

import hcl2
import pytest
import yaml

try:  # python-hcl2 >= 8: ask for plain values (no quotes, no block markers)
    from hcl2.utils import SerializationOptions

    _HCL_OPTS = {"serialization_options": SerializationOptions(
        with_comments=False, explicit_blocks=False, strip_string_quotes=True)}
except ImportError:  # python-hcl2 7
    _HCL_OPTS = {}

REPO = Path(__file__).resolve().parents[2]
TERRAFORM = REPO / "terraform"
SYSTEMD = REPO / "deploy" / "systemd"
CONTAINER = REPO / "deploy" / "container"
AGENT_MODULE = TERRAFORM / "modules" / "agent_host"
COORD_MODULE = TERRAFORM / "modules" / "coordinator_host"
EXAMPLE = TERRAFORM / "examples" / "multi-region"
BOOTSTRAP = TERRAFORM / "files" / "latmesh-bootstrap"
SECRETS_HELPER = SYSTEMD / "latmesh-secrets-env"

SAMPLE_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:latmesh/agent-AbCdEf"
# Values a real secret would hold; they must never show up in rendered user data. Built at
# run time so this file itself trips no credential pattern.
SAMPLE_TOKEN = "tok" + "en-0123456789abcdef-$HOME-`id`-\"q\"-\\b"
SAMPLE_API_KEY = "sk" + "-test-" + "A1b2C3d4E5f6G7h8I9j0"
SAMPLE_PRIVATE_KEY = ("-----BEGIN " + "PRIVATE KEY-----\nZmFrZSBrZXkgZm9yIHRlc3Rz\n"
                      "-----END " + "PRIVATE KEY-----\n")
SAMPLE_CA = "-----BEGIN CERTIFICATE-----\nZmFrZSBjYQ==\n-----END CERTIFICATE-----\n"


def tf_files():
    return sorted(p for p in TERRAFORM.rglob("*.tf") if ".terraform" not in p.parts)


def tf_dirs():
    return sorted({p.parent for p in tf_files()})


@lru_cache(maxsize=None)
def load_hcl(path):
    with open(path, encoding="utf-8") as f:
        return hcl2.load(f, **_HCL_OPTS)


def blocks(directory, kind):
    """name -> body of every `kind` block (variable, output, module, ...) of a directory."""
    out = {}
    for path in sorted(Path(directory).glob("*.tf")):
        for entry in load_hcl(path).get(kind, []):
            for name, body in entry.items():
                assert name not in out, f"{kind} {name} declared twice in {directory}"
                out[name] = body
    return out


def locals_of(directory):
    out = {}
    for path in sorted(Path(directory).glob("*.tf")):
        for entry in load_hcl(path).get("locals", []):
            out.update(entry)
    return out


def rel(path):
    return str(Path(path).relative_to(REPO))


# --------------------------------------------------------------------------------------------
# HCL text helpers: a line with string contents blanked (same length), comments cut off.

def split_code(line):
    """(code, comment): quoted-string contents blanked to spaces, `${...}` kept as code."""
    out, stack, i, n = [], [], 0, len(line)
    while i < n:
        c = line[i]
        top = stack[-1] if stack else None
        if top == "str":
            if c == "\\":
                out.append(" " * len(line[i:i + 2]))
                i += 2
            elif c == '"':
                stack.pop()
                out.append('"')
                i += 1
            elif line.startswith("$${", i) or line.startswith("%%{", i):
                out.append("   ")
                i += 3
            elif line.startswith("${", i) or line.startswith("%{", i):
                stack.append("interp")
                out.append(line[i:i + 2])
                i += 2
            else:
                out.append(" ")
                i += 1
            continue
        if c == '"':
            stack.append("str")
        elif c == "#" or line.startswith("//", i):
            return "".join(out), line[i:]
        elif c == "{" and top in ("interp", "brace"):
            stack.append("brace")
        elif c == "}" and top in ("interp", "brace"):
            stack.pop()
        out.append(c)
        i += 1
    return "".join(out), ""


def bracket_change(code):
    return sum(code.count(c) for c in "{[(") - sum(code.count(c) for c in "}])")


def first_assign(code):
    """Index of the first lone `=` after the line's first token, else None."""
    stripped = len(code) - len(code.lstrip(" "))
    for m in re.finditer(r"=", code):
        i = m.start()
        prev = code[i - 1] if i > 0 else ""
        nxt = code[i + 1] if i + 1 < len(code) else ""
        if prev in "=!<>" or nxt in "=>":
            continue
        if i == stripped:  # the first token of the line
            return None
        return i
    return None


def fmt_problems(text, name="<text>"):
    """What `terraform fmt` would change, for the rules checked here: tabs, trailing
    whitespace, CRLF, the final newline, 2-space indentation by bracket nesting (hclwrite's
    indent stack), `=` aligned within runs of consecutive single-line attributes (one space
    before the longest key's `=`) and one space after `=`."""
    problems = []
    if "\r" in text:
        problems.append(f"{name}: CR characters")
    if not text.endswith("\n"):
        problems.append(f"{name}: does not end with a newline")
    elif text.endswith("\n\n"):
        problems.append(f"{name}: more than one newline at the end")
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    indents = []
    chain = []  # (line number, column of "=", spaces before "=")

    def close_chain():
        if len(chain) > 1:
            cols = {c for _, c, _ in chain}
            if len(cols) != 1:
                problems.append(f"{name}:{chain[0][0]}-{chain[-1][0]}: '=' not aligned "
                                f"(columns {sorted(cols)})")
        if chain and min(s for _, _, s in chain) != 1:
            problems.append(f"{name}:{chain[0][0]}: the longest name of an aligned run must "
                            "have exactly one space before '='")
        chain.clear()

    for no, line in enumerate(lines, 1):
        if "\t" in line:
            problems.append(f"{name}:{no}: tab")
        if line != line.rstrip():
            problems.append(f"{name}:{no}: trailing whitespace")
        if "<<" in split_code(line)[0]:
            problems.append(f"{name}:{no}: heredoc (not supported by this checker)")
        if not line.strip():
            close_chain()
            continue
        code, _comment = split_code(line)
        net = bracket_change(code)
        if net < 0:
            closed = -net
            while closed > 0 and indents:
                if closed >= indents[-1]:
                    closed -= indents.pop()
                else:
                    indents[-1] -= closed
                    closed = 0
        want = 2 * len(indents)
        if net > 0:
            indents.append(net)
        have = len(line) - len(line.lstrip(" "))
        if have != want:
            problems.append(f"{name}:{no}: indented {have} spaces, terraform fmt indents {want}")
        eq = first_assign(code) if code.strip() else None
        if eq is not None and bracket_change(code[eq:]) == 0:
            before = len(code[:eq]) - len(code[:eq].rstrip(" "))
            if not re.match(r"= \S", line[eq:]):
                problems.append(f"{name}:{no}: one space after '='")
            chain.append((no, eq, before))
        else:
            close_chain()
    close_chain()
    return problems


def references(text, kind):
    """Names used as kind.NAME (var, local, module) in code, not in string text."""
    names = set()
    for line in text.splitlines():
        code, _ = split_code(line)
        names.update(re.findall(rf"(?<![\w.]){kind}\.([A-Za-z_][A-Za-z0-9_-]*)", code))
    return names


# --------------------------------------------------------------------------------------------
# Terraform: parsing, variables, references, formatting


def test_terraform_tree_exists():
    for d in (AGENT_MODULE, COORD_MODULE, EXAMPLE):
        assert (d / "variables.tf").is_file(), d
        assert (d / "main.tf").is_file(), d
    assert len(tf_files()) >= 12


@pytest.mark.parametrize("path", tf_files(), ids=rel)
def test_tf_file_parses(path):
    load_hcl(path)


def test_tfvars_example_parses_and_names_declared_variables():
    example = EXAMPLE / "terraform.tfvars.example"
    values = load_hcl(example)
    declared = blocks(EXAMPLE, "variable")
    assert set(values) <= set(declared), set(values) - set(declared)
    required = {n for n, v in declared.items() if "default" not in v}
    # the two binaries come from S3 in the example; every other required variable is set
    assert required <= set(values), required - set(values)
    assert values["agents"] == {"us-east-1": 1, "eu-west-1": 1, "ap-southeast-1": 1}
    assert not list(EXAMPLE.glob("*.tfvars")), "only terraform.tfvars.example belongs in git"


@pytest.mark.parametrize("directory", tf_dirs(), ids=rel)
def test_variables_have_description_and_type(directory):
    variables = blocks(directory, "variable")
    assert variables, f"{rel(directory)} declares no variable"
    for name, body in variables.items():
        assert isinstance(body.get("description"), str) and len(body["description"]) >= 10, \
            f"{rel(directory)}: variable {name} has no description"
        assert body.get("type"), f"{rel(directory)}: variable {name} has no type"


@pytest.mark.parametrize("directory", tf_dirs(), ids=rel)
def test_outputs_have_description(directory):
    for name, body in blocks(directory, "output").items():
        assert body.get("description"), f"{rel(directory)}: output {name} has no description"


@pytest.mark.parametrize("directory", tf_dirs(), ids=rel)
def test_references_are_declared(directory):
    text = "\n".join(p.read_text() for p in sorted(directory.glob("*.tf")))
    variables, local_names = set(blocks(directory, "variable")), set(locals_of(directory))
    modules = blocks(directory, "module")
    assert references(text, "var") <= variables, references(text, "var") - variables
    assert references(text, "local") <= local_names, references(text, "local") - local_names
    assert references(text, "module") <= set(modules), references(text, "module") - set(modules)
    # module.NAME.OUTPUT: the output exists in that module
    for line in text.splitlines():
        code, _ = split_code(line)
        for mod, out in re.findall(r"(?<![\w.])module\.(\w+)\.(\w+)", code):
            source = (directory / modules[mod]["source"]).resolve()
            assert out in blocks(source, "output"), f"module.{mod}.{out}: no such output"


@pytest.mark.parametrize("directory", tf_dirs(), ids=rel)
def test_module_calls_match_module_variables(directory):
    meta = {"source", "version", "for_each", "count", "providers", "depends_on"}
    for name, body in blocks(directory, "module").items():
        source = (directory / body["source"]).resolve()
        assert source.is_dir(), f"module {name}: {body['source']} is not a directory"
        declared = blocks(source, "variable")
        passed = set(body) - meta
        assert passed <= set(declared), f"module {name}: unknown arguments {passed - set(declared)}"
        required = {n for n, v in declared.items() if "default" not in v}
        assert required <= passed, f"module {name}: missing {required - passed}"


@pytest.mark.parametrize("directory", tf_dirs(), ids=rel)
def test_file_paths_in_modules_exist(directory):
    """Every "${path.module}/..." and "${local.X}/..." path that file()/templatefile() read."""
    loc = locals_of(directory)
    base = {"path.module": directory}
    for key in ("repo_root", "files"):
        if key in loc:
            m = re.fullmatch(r"\$\{path\.module\}/(.+)", loc[key])
            assert m, loc[key]
            base[f"local.{key}"] = directory / m.group(1)
    text = "\n".join(p.read_text() for p in sorted(directory.glob("*.tf")))
    for fn, prefix, tail in re.findall(r'(file|templatefile)\("\$\{([\w.]+)\}/([^"]+)"', text):
        path = (base[prefix] / tail).resolve()
        assert path.is_file(), f"{rel(directory)}: {fn}() reads {path}, which does not exist"


@pytest.mark.parametrize("path", tf_files() + sorted(TERRAFORM.rglob("*.tftest.hcl"))
                         + [EXAMPLE / "terraform.tfvars.example"], ids=rel)
def test_tf_formatting(path):
    assert fmt_problems(path.read_text(), rel(path)) == []


FMT_BAD = {
    "misaligned": 'resource "x" "y" {\n  a = 1\n  bbb = 2\n}\n',
    "too_much_space": 'resource "x" "y" {\n  a    = 1\n  bbb  = 2\n}\n',
    "bad_indent": 'resource "x" "y" {\n    a = 1\n}\n',
    "nested_indent": 'resource "x" "y" {\n  tags = {\n  Name = "n"\n  }\n}\n',
    "trailing_ws": 'resource "x" "y" {\n  a = 1 \n}\n',
    "tab": 'resource "x" "y" {\n\ta = 1\n}\n',
    "no_final_newline": 'resource "x" "y" {\n  a = 1\n}',
    "two_final_newlines": 'resource "x" "y" {\n  a = 1\n}\n\n',
    "no_space_after_eq": 'resource "x" "y" {\n  a =1\n}\n',
}
FMT_GOOD = textwrap.dedent('''\
    resource "x" "y" {
      a   = 1
      bbb = "{ = [ not code"

      list = [
        "a",
      ]
      cond = (
        var.x
        ? "${var.y}-{"
        : "z"
      )
      tags = merge(var.tags, { Name = "n" }) # a comment = here

      nested {
        k = "v"
      }
    }
    ''')


@pytest.mark.parametrize("case", sorted(FMT_BAD))
def test_fmt_checker_catches(case):
    assert fmt_problems(FMT_BAD[case]) != [], f"{case} passed the checker"


def test_fmt_checker_accepts_formatted_hcl():
    assert fmt_problems(FMT_GOOD) == []


def run_terraform(args, env_extra=None, timeout=120, **kw):
    env = dict(os.environ, TF_IN_AUTOMATION="1", CHECKPOINT_DISABLE="1", **(env_extra or {}))
    env.pop("TF_DATA_DIR", None)  # .terraform/ of each directory, in the directory
    return subprocess.run(["terraform", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, **kw)


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary here")
def test_terraform_fmt_agrees():
    """Second opinion, where a terraform binary exists: fmt -check passes on the tree, keeps
    the checker's good sample and rewrites every bad one."""
    proc = run_terraform(["fmt", "-check", "-recursive", "-diff", str(TERRAFORM)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert run_terraform(["fmt", "-"], input=FMT_GOOD).stdout == FMT_GOOD
    for case, text in FMT_BAD.items():
        if case == "two_final_newlines":  # stricter than terraform fmt, which keeps them
            continue
        assert run_terraform(["fmt", "-"], input=text).stdout != text, case


def provider_mirror():
    """A filesystem mirror holding hashicorp/aws (LATMESH_TF_PLUGIN_MIRROR, or a usual place),
    so that `terraform init` works offline; None without one."""
    candidates = [os.environ.get("LATMESH_TF_PLUGIN_MIRROR", ""), "/opt/tf-plugins",
                  os.path.expanduser("~/.terraform.d/plugins"), "/usr/local/share/terraform/plugins",
                  "/usr/share/terraform/plugins"]
    for c in candidates:
        if c and (Path(c) / "registry.terraform.io/hashicorp/aws").is_dir():
            return Path(c)
    return None


@pytest.mark.skipif(shutil.which("terraform") is None or provider_mirror() is None,
                    reason="needs a terraform binary and the hashicorp/aws provider in a local "
                           "filesystem mirror (set LATMESH_TF_PLUGIN_MIRROR)")
def test_terraform_validate_and_test_with_mocked_aws(tmp_path):
    """terraform init (offline, from the mirror) + validate on both modules and the example,
    then `terraform test` in the example: its tests/mock.tftest.hcl applies the whole
    configuration against mocked AWS providers and checks the outputs, the rendered user data
    (yamldecode, against deploy/systemd) and the validations."""
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*")
    shutil.copytree(TERRAFORM, copy / "terraform", ignore=ignore)
    shutil.copytree(SYSTEMD, copy / "deploy" / "systemd")
    cli = tmp_path / "cli.tfrc"
    cli.write_text(textwrap.dedent(f"""\
        provider_installation {{
          filesystem_mirror {{
            path    = "{provider_mirror()}"
            include = ["registry.terraform.io/hashicorp/*"]
          }}
          direct {{
            exclude = ["registry.terraform.io/hashicorp/*"]
          }}
        }}
        """))
    env = {"TF_CLI_CONFIG_FILE": str(cli)}

    def tf(args, cwd):
        proc = run_terraform(["-chdir=" + str(cwd), *args, "-no-color"], env_extra=env, timeout=600)
        assert proc.returncode == 0, f"terraform {' '.join(args)} in {cwd}:\n" + \
            (proc.stdout + proc.stderr)[-4000:]
        return proc.stdout
    for d in (AGENT_MODULE, COORD_MODULE, EXAMPLE):
        where = copy / d.relative_to(REPO)
        tf(["init", "-backend=false", "-input=false"], where)
        tf(["validate"], where)
    out = tf(["test"], copy / EXAMPLE.relative_to(REPO))
    assert re.search(r"Success! [1-9]\d* passed, 0 failed", out), out[-2000:]


# --------------------------------------------------------------------------------------------
# The multi-region example


def provider_regions():
    out = {}
    for entry in load_hcl(EXAMPLE / "providers.tf")["provider"]:
        body = entry["aws"]
        if "alias" in body:
            out[body["alias"]] = body["region"]
    return out


def test_multi_region_providers_modules_and_lists_agree():
    aliases = provider_regions()
    assert len(aliases) >= 6, aliases
    assert all(a == r.replace("-", "_") for a, r in aliases.items()), aliases
    modules = {n: b for n, b in blocks(EXAMPLE, "module").items() if n.startswith("agents_")}
    seen = {}
    for name, body in modules.items():
        assert body["source"] == "../../modules/agent_host"
        alias = re.fullmatch(r"\$\{aws\.(\w+)\}", body["providers"]["aws"]).group(1)
        assert aliases[alias] == body["region"], f"{name}: provider {alias} vs {body['region']}"
        assert name == f"agents_{alias}"
        assert f'"{body["region"]}"' in body["for_each"], f"{name}: for_each {body['for_each']}"
        seen[body["region"]] = name
    assert set(seen) == set(aliases.values()), set(aliases.values()) ^ set(seen)
    loc = locals_of(EXAMPLE)
    assert set(loc["supported_regions"]) == set(seen)
    merged = set(re.findall(r"module\.(agents_\w+)", loc["agent_modules"]))
    assert merged == set(modules), merged ^ set(modules)
    validation = " ".join(v["condition"] for v in blocks(EXAMPLE, "variable")["agents"]["validation"])
    assert set(re.findall(r'"([a-z]{2}-[a-z]+-\d)"', validation)) == set(seen)
    readme = (TERRAFORM / "README.md").read_text()
    m = re.search(r"Supported: ([a-z0-9, -]+)\.", readme.replace("\n", " "))
    assert m and {r.strip() for r in m.group(1).split(",")} == set(seen), "README's Supported list"
    assert "cannot create provider" in readme


@pytest.mark.parametrize("directory", [AGENT_MODULE, COORD_MODULE, EXAMPLE], ids=rel)
def test_readme_documents_every_variable_and_output(directory):
    readme = (TERRAFORM / "README.md").read_text()
    heading = f"### {directory.relative_to(TERRAFORM)}\n"
    assert heading in readme, heading
    section = readme.split(heading, 1)[1].split("\n### ", 1)[0]
    for name, body in blocks(directory, "variable").items():
        type_ = re.sub(r"^\$\{(.*)\}$", r"\1", body["type"])
        assert f"| `{name}` | `{type_}` |" in section, f"README: no row for {name} ({type_})"
    rows = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert rows == set(blocks(directory, "variable")), rows ^ set(blocks(directory, "variable"))
    outputs_line = section.split("Outputs:", 1)[1].split("\n\n", 1)[0]
    for name in blocks(directory, "output"):
        assert f"`{name}`" in outputs_line, f"README: output {name} not listed"


def test_multi_region_outputs():
    outputs = blocks(EXAMPLE, "output")
    assert {"coordinator_address", "agents"} <= set(outputs)
    agents = outputs["agents"]["value"]
    for field in ("region", "id", "instance_id", "public_ip"):
        assert re.search(rf"\b{field}\s*=", agents), field


def test_agent_module_security_group_is_egress_only():
    resources = {}
    for entry in load_hcl(AGENT_MODULE / "main.tf")["resource"]:
        for rtype, named in entry.items():
            for name, body in named.items():
                resources[(rtype, name)] = body
    ingress = [k for k in resources if k[0] == "aws_vpc_security_group_ingress_rule"]
    assert ingress == [("aws_vpc_security_group_ingress_rule", "ssh")]
    assert resources[ingress[0]]["for_each"] == "${toset(var.ssh_cidrs)}"
    assert blocks(AGENT_MODULE, "variable")["ssh_cidrs"]["default"] == []
    assert not any(k[0] == "aws_security_group_rule" for k in resources)
    sg = resources[("aws_security_group", "agent")]
    assert "ingress" not in sg and "egress" not in sg  # rules only as separate resources


def test_coordinator_grpc_port_only_from_allowed_cidrs():
    text = (COORD_MODULE / "main.tf").read_text()
    assert blocks(COORD_MODULE, "variable")["grpc_port"]["default"] == 7700
    ingress = re.findall(r'resource "aws_vpc_security_group_ingress_rule" "(\w+)" \{(.*?)\n\}', text, re.S)
    assert {n for n, _ in ingress} == {"grpc", "ssh"}
    body = dict(ingress)["grpc"]
    assert "toset(var.grpc_allowed_cidrs)" in body and "var.grpc_port" in body


@pytest.mark.parametrize("module", [AGENT_MODULE, COORD_MODULE], ids=rel)
def test_iam_reads_exactly_one_secret(module):
    text = (module / "main.tf").read_text()
    actions = {a for group in re.findall(r"actions\s*=\s*\[(.*?)\]", text)
               for a in re.findall(r'"([^"]+)"', group)}
    assert actions == {"sts:AssumeRole", "secretsmanager:GetSecretValue", "s3:GetObject",
                       "kms:Decrypt"}, actions
    m = re.search(r'actions\s*=\s*\["secretsmanager:GetSecretValue"\]\s*\n\s*resources\s*=\s*\[var\.secret_arn\]', text)
    assert m, "GetSecretValue must be on [var.secret_arn] only"
    assert "*" not in "".join(re.findall(r"resources\s*=\s*\[(.*?)\]", text))


# --------------------------------------------------------------------------------------------
# No credentials anywhere

CREDENTIAL_PATTERNS = [
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----")),
    ("password with a literal", re.compile(
        r"""(?i)\bpass(?:word|wd)\b["']?\s*[:=]\s*["'][^"'\s$]+["']""")),
    ("secret with a literal", re.compile(
        r"""(?i)\b(?:aws_secret_access_key|secret_access_key|client_secret|api_?key|"""
        r"""access_token|auth_token)\b["']?\s*[:=]\s*["'][^"'\s$]{8,}["']""")),
    ("key or token assigned in an env file", re.compile(
        r"(?m)^\s*(?:export\s+)?[A-Z0-9_]*(?:PASSWORD|TOKEN|API_KEY|SECRET)[A-Z0-9_]*"
        r"""=["']?[A-Za-z0-9._~+/=-]{8,}["']?\s*$""")),
    ("OpenAI-style key", re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9_-]{20,}")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("bearer token", re.compile(r"(?i)authorization:\s*bearer\s+[A-Za-z0-9._~+/-]{16,}")),
]


def credential_findings(text, name):
    found = []
    for label, pattern in CREDENTIAL_PATTERNS:
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: {label}")
    return found


def scanned_files():
    skip = {".terraform", "__pycache__", ".pytest_cache"}
    for root in (TERRAFORM, REPO / "deploy"):
        for p in sorted(root.rglob("*")):
            if p.is_file() and not skip & set(p.parts):
                yield p


def test_no_credentials_in_terraform_or_deploy():
    found = []
    for p in scanned_files():
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += credential_findings(text, rel(p))
    assert found == []


@pytest.mark.parametrize("planted", [
    "AKIA" + "IOSFODNN7EXAMPLE",
    "-----BEGIN RSA " + "PRIVATE KEY-----",
    'password = "' + 'hunter22"',
    'api_key = "' + 'abcd1234efgh"',
    "LATMESH_AGENT_" + "TOKEN=0123456789abcdef",
    "PROVIDER_A_API_" + "KEY=" + "sk-" + "abcdefghijklmnopqrstuvwx",
])
def test_credential_scan_catches(planted):
    assert credential_findings(f"x\n{planted}\n", "planted")


def test_credential_scan_allows_placeholders():
    for text in ("LATMESH_AGENT_TOKEN=...", "LATMESH_ADMIN_TOKEN=$(cat admin.token)",
                 "password = var.db_password", "# LATMESH_AGENT_TOKEN=..."):
        assert credential_findings(text, "ok") == [], text


# --------------------------------------------------------------------------------------------
# cloud-init: the template rendered as templatefile would, then read as YAML

INTERP = re.compile(r"\$\$\{|%%\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def template_placeholders(text):
    """The ${name} placeholders; fails on any other template construct."""
    names = set()
    stripped = INTERP.sub(lambda m: names.add(m.group(1)) or "", text)
    assert "${" not in stripped and "%{" not in stripped, \
        "only plain ${name} substitutions (escape a literal ${ as $${)"
    names.discard(None)
    return names


def render(text, values):
    """templatefile() for a template of plain ${name} substitutions, $${ and %%{ escapes."""
    template_placeholders(text)

    def sub(m):
        if m.group(0) == "$${":
            return "${"
        if m.group(0) == "%%{":
            return "%{"
        return values[m.group(1)]
    return INTERP.sub(sub, text)


def tf_indent(n, s):
    """Terraform's indent(): spaces after every newline (not before the first line)."""
    return s.replace("\n", "\n" + " " * n)


def module_template_vars(module, settings_env, bootstrap_command):
    """Evaluate the module's templatefile() arguments the way Terraform does, for the few
    expression forms the modules use; anything else fails so this test gets updated."""
    text = (module / "main.tf").read_text()
    m = re.search(r'templatefile\("\$\{path\.module\}/([^"]+)",\s*\{(.*?)\n\s*\}\)', text, re.S)
    assert m, f"{rel(module)}: no templatefile() call"
    template = module / m.group(1)
    loc = locals_of(module)
    base = {"repo_root": module / loc["repo_root"].split("/", 1)[1],
            "files": module / loc["files"].split("/", 1)[1]}
    values = {}
    for name, expr in re.findall(r"^\s*(\w+)\s*=\s*(.+?)\s*$", m.group(2), re.M):
        if fm := re.fullmatch(r'indent\((\d+), file\("\$\{local\.(\w+)\}/([^"]+)"\)\)', expr):
            values[name] = tf_indent(int(fm.group(1)), (base[fm.group(2)] / fm.group(3)).read_text())
        elif fm := re.fullmatch(r"indent\((\d+), local\.settings_env\)", expr):
            values[name] = tf_indent(int(fm.group(1)), settings_env)
        elif expr == "var.secret_arn":
            values[name] = SAMPLE_ARN
        elif expr == "jsonencode(local.bootstrap_command)":
            values[name] = json.dumps(bootstrap_command)
        else:
            pytest.fail(f"{rel(module)}: the test cannot evaluate {name} = {expr}")
    return template, values


def settings_env_of(settings):
    """local.settings_env: sorted KEY=value lines."""
    return "".join(f"{k}={settings[k]}\n" for k in sorted(settings))


AGENT_SETTINGS = {
    "LATMESH_COORDINATOR": "https://coord.example.com:7700",
    "LATMESH_REGION": "eu-west-1",
    "LATMESH_AGENT_ID": "eu-west-1-01",
    "LATMESH_LOG": "info",
}
AGENT_BOOTSTRAP = [
    "/usr/local/libexec/latmesh/latmesh-bootstrap", "--binary-source",
    "s3://my-bucket/latmesh/0.1.0/amd64/latmesh-agent", "--binary-sha256", "ab" * 32,
    "--binary-dest", "/usr/local/bin/latmesh-agent", "--region", "eu-west-1",
    "--unit", "latmesh-agent.service",
]
COORD_SETTINGS = {
    "LATMESH_LISTEN": "0.0.0.0:7700",
    "LATMESH_CLICKHOUSE_URL": "http://127.0.0.1:8123",
}
COORD_BOOTSTRAP = [
    "/usr/local/libexec/latmesh/latmesh-bootstrap", "--binary-source",
    "https://artifacts.example.com/latmesh", "--binary-sha256", "cd" * 32,
    "--binary-dest", "/usr/local/bin/latmesh", "--region", "us-east-1",
    "--state-volume-id", "vol-0123456789abcdef0", "--state-device", "/dev/sdf",
    "--state-mount", "/var/lib/latmesh", "--clickhouse", "--unit", "latmesh-coordinator.service",
]

HOSTS = {
    "agent": (AGENT_MODULE, "latmesh-agent", AGENT_SETTINGS, AGENT_BOOTSTRAP),
    "coordinator": (COORD_MODULE, "latmesh-coordinator", COORD_SETTINGS, COORD_BOOTSTRAP),
}


@lru_cache(maxsize=None)
def rendered(host):
    module, _unit, settings, bootstrap = HOSTS[host]
    template, values = module_template_vars(module, settings_env_of(settings), bootstrap)
    return template, values, render(template.read_text(), values)


def write_files(host):
    doc = yaml.safe_load(rendered(host)[2])
    return doc, {f["path"]: f for f in doc["write_files"]}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_template_uses_plain_substitutions_and_module_passes_them_all(host):
    template, values, _ = rendered(host)
    assert template_placeholders(template.read_text()) == set(values)


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_module_settings_and_bootstrap_flags_match_the_test(host):
    """The test's sample settings and bootstrap command have the module's shape, and every
    bootstrap flag the module passes is one latmesh-bootstrap parses."""
    module, _unit, settings, _ = HOSTS[host]
    text = (module / "main.tf").read_text()
    block = re.search(r"\n  settings = merge\((.*?)\n  settings_env = ", text, re.S)
    assert block, "settings = merge(...) followed by settings_env"
    for key in settings:
        if key != "LATMESH_LOG":  # from extra_environment in the sample
            assert key in block.group(1), f"{rel(module)}: settings lacks {key}"
    flags = set(re.findall(r'"(--[a-z0-9-]+)"', re.search(
        r"bootstrap_command = concat\((.*?)\n  \)", text, re.S).group(1)))
    parsed = set(re.findall(r"^\t(--[a-z0-9-]+)\)", BOOTSTRAP.read_text(), re.M))
    assert flags and flags <= parsed, flags - parsed
    assert flags == {f for f in HOSTS[host][3] if f.startswith("--")}


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_cloud_init_yaml_installs_the_repository_files(host):
    _module, unit, settings, bootstrap = HOSTS[host]
    text = rendered(host)[2]
    assert text.startswith("#cloud-config\n")
    doc, files = write_files(host)
    assert files[f"/etc/systemd/system/{unit}.service"]["content"] == \
        (SYSTEMD / f"{unit}.service").read_text()
    assert files["/etc/sysusers.d/latmesh.conf"]["content"] == \
        (SYSTEMD / "latmesh.sysusers.conf").read_text()
    assert files["/usr/local/libexec/latmesh/latmesh-secrets-env"]["content"] == SECRETS_HELPER.read_text()
    assert files["/usr/local/libexec/latmesh/latmesh-bootstrap"]["content"] == BOOTSTRAP.read_text()
    for path in ("/usr/local/libexec/latmesh/latmesh-secrets-env",
                 "/usr/local/libexec/latmesh/latmesh-bootstrap"):
        assert files[path]["permissions"] == "0755"
    assert doc["runcmd"] == [bootstrap]
    assert {"awscli", "curl", "python3", "ca-certificates"} <= set(doc["packages"])


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_cloud_init_settings_and_secret_files(host):
    _module, unit, settings, _ = HOSTS[host]
    _doc, files = write_files(host)
    name = unit.removeprefix("latmesh-")
    settings_file = files[f"/etc/latmesh/{name}.settings.env"]
    assert settings_file["content"] == settings_env_of(settings)
    if host == "agent":
        assert "LATMESH_COORDINATOR=https://coord.example.com:7700\n" in settings_file["content"]
        assert "LATMESH_REGION=eu-west-1\n" in settings_file["content"]
        assert "LATMESH_AGENT_ID=eu-west-1-01\n" in settings_file["content"]
    placeholder = files[f"/etc/latmesh/{name}.env"]
    assert placeholder["content"] == "" and placeholder["permissions"] == "0600"
    dropin = files[f"/etc/systemd/system/{unit}.service.d/10-secrets-manager.conf"]["content"]
    assert re.search(rf"^ExecStartPre=\+/usr/local/libexec/latmesh/latmesh-secrets-env "
                     rf"--secret-id {re.escape(SAMPLE_ARN)} --env-file /etc/latmesh/{name}.env "
                     rf"--pem-dir /etc/latmesh/tls$", dropin, re.M), dropin
    # every EnvironmentFile= of the unit is written by cloud-init (else the unit cannot start)
    env_files = unit_settings(SYSTEMD / f"{unit}.service")["EnvironmentFile"]
    assert set(env_files) <= set(files), set(env_files) - set(files)


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_cloud_init_holds_no_secret_and_fits_ec2(host):
    text = rendered(host)[2]
    for value in (SAMPLE_TOKEN, SAMPLE_API_KEY, SAMPLE_PRIVATE_KEY.splitlines()[1], "ZmFrZSBjYQ"):
        assert value not in text
    assert credential_findings(text, f"{host} user data") == []
    assert not re.search(r"^\s*(LATMESH_AGENT_TOKEN|LATMESH_ADMIN_TOKEN)=", text, re.M)
    size = len(base64.b64encode(gzip.compress(text.encode(), mtime=0)))
    assert size < 16384, f"user data base64gzip is {size} bytes; EC2 allows 16 KiB"


@pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform binary here")
@pytest.mark.parametrize("host", sorted(HOSTS))
def test_render_matches_terraform_templatefile(host, tmp_path):
    """Where a terraform binary exists: templatefile() itself renders byte for byte what
    the test rendered (terraform console, offline, no provider needed)."""
    template, values, text = rendered(host)
    args = []
    for name, value in values.items():
        (tmp_path / name).write_text(value)
        args.append(f'{name} = file("{tmp_path / name}")')
    expr = f'base64encode(templatefile("{template}", {{ {", ".join(args)} }}))\n'
    proc = run_terraform(["console"], input=expr, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.strip().strip('"')
    assert base64.b64decode(out).decode() == text


# --------------------------------------------------------------------------------------------
# systemd units


def unit_settings(path):
    """key -> list of values (a unit may repeat keys), over all sections."""
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


UNITS = ["latmesh-agent.service", "latmesh-coordinator.service"]


@pytest.mark.parametrize("unit", UNITS)
def test_unit_settings(unit):
    s = unit_settings(SYSTEMD / unit)
    one = {k: v[-1] for k, v in s.items()}
    assert one["Restart"] == "on-failure" and "RestartSec" in one
    assert one["User"] == "latmesh" and one["Group"] == "latmesh"
    assert all(re.fullmatch(r"/etc/latmesh/[a-z.]+\.env", f) for f in s["EnvironmentFile"])
    expected = {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "CapabilityBoundingSet": "",
        "AmbientCapabilities": "", "MemoryDenyWriteExecute": "yes", "RestrictSUIDSGID": "yes",
    }
    for key, value in expected.items():
        assert one.get(key) == value, f"{unit}: {key}={one.get(key)!r}, want {value!r}"
    assert "@system-service" in s["SystemCallFilter"]
    assert int(one["LimitNOFILE"]) >= 16384, "10k streams need 10k sockets and then some"
    state = one["StateDirectory"]
    assert state.startswith("latmesh")
    writable = [f"/var/lib/{state}"] + one["ReadWritePaths"].split()
    assert f"/var/lib/{state}" in one["ReadWritePaths"].split()
    # every directory the service writes is under a writable path
    dirs = re.findall(r"--(?:spool|state)-dir (\S+)", one["ExecStart"])
    dirs += [v.split("=", 1)[1] for v in s.get("Environment", []) if "_DIR=" in v]
    assert dirs, f"{unit}: no state or spool directory set"
    for d in dirs:
        assert any(d == w or d.startswith(w + "/") for w in writable), f"{unit}: {d} not writable"
    assert one["ExecStart"].split()[0] in ("/usr/local/bin/latmesh", "/usr/local/bin/latmesh-agent")


def test_env_var_names_are_ones_latmesh_reads():
    """Every LATMESH_* name in the deployment files is read by the binaries (or is one of
    the secrets helper's PEM keys)."""
    known = set()
    for crate in ("agent", "coordinator", "core"):
        for p in (REPO / crate / "src").rglob("*.rs"):
            known.update(re.findall(r"LATMESH_[A-Z0-9_]+", p.read_text()))
    known |= {"LATMESH_TLS_CERT_PEM", "LATMESH_TLS_KEY_PEM", "LATMESH_CA_PEM"}
    used = {}
    for p in [*SYSTEMD.iterdir(), *CONTAINER.iterdir(), *TERRAFORM.rglob("*.tf"),
              *TERRAFORM.rglob("*.tftpl"), BOOTSTRAP]:
        if p.is_file():
            for name in re.findall(r"LATMESH_[A-Z0-9_]+", p.read_text()):
                used.setdefault(name, rel(p))
    unknown = {n: f for n, f in used.items() if n not in known}
    assert unknown == {}


def latmesh_binary(name):
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


@pytest.mark.skipif(latmesh_binary("latmesh") is None, reason="target/*/latmesh not built")
def test_coordinator_flags_exist():
    help_text = subprocess.run([latmesh_binary("latmesh"), "serve", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    unit = unit_settings(SYSTEMD / "latmesh-coordinator.service")["ExecStart"][0]
    container = (CONTAINER / "Containerfile.coordinator").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", container, re.M).group(1))
    assert unit.split()[1] == "serve" and cmd[0] == "serve"
    for flag in set(re.findall(r"--[a-z-]+", unit)) | {a for a in cmd if a.startswith("--")}:
        assert f"{flag} " in help_text or f"{flag}\n" in help_text, f"latmesh serve has no {flag}"
    for var in ("LATMESH_LISTEN", "LATMESH_TLS_CERT", "LATMESH_TLS_KEY", "LATMESH_STATE_DIR",
                "LATMESH_CLICKHOUSE_URL", "LATMESH_AGENT_TOKEN_FILE"):
        assert f"env: {var}=" in help_text, var


@pytest.mark.skipif(latmesh_binary("latmesh-agent") is None, reason="target/*/latmesh-agent not built")
def test_agent_env_vars_exist():
    help_text = subprocess.run([latmesh_binary("latmesh-agent"), "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    for var in ("LATMESH_COORDINATOR", "LATMESH_REGION", "LATMESH_AGENT_ID",
                "LATMESH_AGENT_SPOOL_DIR", "LATMESH_CA_FILE"):
        assert f"env: {var}=" in help_text, var


def systemd_root(tmp_path):
    """A file system root with the system's own units (targets), every file cloud-init
    writes on both hosts, and the binaries latmesh-bootstrap installs (stubs)."""
    root = tmp_path / "root"
    for src in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if src.is_dir():
            shutil.copytree(src, root / "usr/lib/systemd/system", symlinks=True)
            break
    for host in HOSTS:
        _doc, files = write_files(host)
        for path, entry in files.items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(entry.get("content", ""))
            target.chmod(int(entry.get("permissions", "0644"), 8))
        dest = HOSTS[host][3][HOSTS[host][3].index("--binary-dest") + 1]
        stub = root / dest.lstrip("/")
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return root


def verify(root, *units):
    proc = subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", *[f"/etc/systemd/system/{u}" for u in units]],
        capture_output=True, text=True, timeout=120)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")


@needs_systemd_analyze
def test_systemd_analyze_verify_units_as_installed(tmp_path):
    """The units and their Secrets Manager drop-ins, exactly as cloud-init writes them, under
    a root where the binaries exist: no error, no warning."""
    root = systemd_root(tmp_path)
    rc, out = verify(root, *UNITS)
    assert (rc, out) == (0, "")


@needs_systemd_analyze
def test_systemd_analyze_verify_is_not_a_no_op(tmp_path):
    """The same harness reports a misspelt key in a drop-in and a missing binary."""
    root = systemd_root(tmp_path)
    bogus = root / "etc/systemd/system/latmesh-agent.service.d/99-bogus.conf"
    bogus.write_text("[Service]\nNoNewPrivilege=yes\n")
    rc, out = verify(root, "latmesh-agent.service")
    assert "Unknown key" in out and "NoNewPrivilege" in out, out
    bogus.unlink()
    (root / "usr/local/bin/latmesh").unlink()
    rc, out = verify(root, "latmesh-coordinator.service")
    assert rc != 0 and "/usr/local/bin/latmesh" in out, out


@needs_systemd_analyze
@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_security_exposure(unit, tmp_path):
    root = systemd_root(tmp_path)
    proc = subprocess.run(["systemd-analyze", "security", "--offline=true", f"--root={root}",
                           "--threshold=20", "--no-pager", f"/etc/systemd/system/{unit}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    m = re.search(r"Overall exposure level for \S+: ([\d.]+)", proc.stdout)
    assert m and float(m.group(1)) <= 2.0, proc.stdout[-500:]


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="no systemd-sysusers here")
def test_sysusers_creates_the_latmesh_system_user(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    proc = subprocess.run(["systemd-sysusers", f"--root={root}", str(SYSTEMD / "latmesh.sysusers.conf")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    entry = [line.split(":") for line in (root / "etc/passwd").read_text().splitlines()
             if line.startswith("latmesh:")]
    assert entry, (root / "etc/passwd").read_text()
    name, _pw, uid, gid, _gecos, home, shell = entry[0]
    assert int(uid) < 1000 and home == "/var/lib/latmesh" and shell == "/usr/sbin/nologin"
    assert any(line.startswith(f"latmesh:x:{gid}:") for line in (root / "etc/group").read_text().splitlines())


# --------------------------------------------------------------------------------------------
# latmesh-secrets-env (with a stub aws CLI)


def stub(directory, name, body):
    p = directory / name
    p.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    p.chmod(0o755)
    return p


def clean_env(bindir, home, **extra):
    """A minimal environment: the stubs first, then the system directories only (no pyenv
    shims or user bin dirs, where a real aws CLI could be found), no AWS_* variables."""
    return {"PATH": f"{bindir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home), "LANG": "C.UTF-8", **extra}


@pytest.fixture
def aws_stub(tmp_path):
    bindir = tmp_path / "stubs"
    bindir.mkdir()
    stub(bindir, "aws", """\
        printf '%s\\n' "$*" >>"$STUB_LOG"
        [ -n "${STUB_FAIL:-}" ] && { echo "An error occurred (AccessDeniedException)" >&2; exit 255; }
        cat "$STUB_SECRET"
        """)
    return clean_env(bindir, tmp_path, STUB_LOG=str(tmp_path / "aws.log"),
                     STUB_SECRET=str(tmp_path / "secret.json"))


def run_helper(env, tmp_path, secret, *extra):
    (tmp_path / "secret.json").write_text(json.dumps({"ARN": SAMPLE_ARN, "SecretString": json.dumps(secret)}))
    group = grp.getgrgid(os.getegid()).gr_name
    return subprocess.run(
        [sys.executable, str(SECRETS_HELPER), "--secret-id", SAMPLE_ARN, "--env-file",
         str(tmp_path / "etc/agent.env"), "--pem-dir", str(tmp_path / "etc/tls"), "--group", group,
         *extra], capture_output=True, text=True, env=env, timeout=60)


def test_secrets_helper_writes_env_and_pem_files(aws_stub, tmp_path):
    secret = {"LATMESH_AGENT_TOKEN": SAMPLE_TOKEN, "PROVIDER_A_API_KEY": SAMPLE_API_KEY,
              "LATMESH_CA_PEM": SAMPLE_CA, "LATMESH_TLS_KEY_PEM": SAMPLE_PRIVATE_KEY}
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/agent.env").write_text("OLD=1\n")
    proc = run_helper(aws_stub, tmp_path, secret)
    assert proc.returncode == 0, proc.stderr
    for value in (SAMPLE_TOKEN, SAMPLE_API_KEY, "ZmFrZSBrZXk"):
        assert value not in proc.stderr + proc.stdout
    log = (tmp_path / "aws.log").read_text()
    assert f"--secret-id {SAMPLE_ARN}" in log and "--region eu-west-1" in log
    env_file = tmp_path / "etc/agent.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert "OLD=1" not in env_file.read_text()
    assert not [p for p in (tmp_path / "etc").iterdir() if p.name.startswith(".tmp-")]
    # systemd's EnvironmentFile= and a POSIX shell read the same values back
    dump = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; printf "%s\\0" "$LATMESH_AGENT_TOKEN" "$PROVIDER_A_API_KEY" '
                       '"$LATMESH_CA_FILE" "$LATMESH_TLS_KEY"', "-", str(env_file)],
        capture_output=True, text=True, env={"PATH": os.environ["PATH"]}).stdout.split("\0")
    tls = tmp_path / "etc/tls"
    assert dump[:4] == [SAMPLE_TOKEN, SAMPLE_API_KEY, str(tls / "ca.pem"), str(tls / "tls-key.pem")]
    assert (tls / "ca.pem").read_text() == SAMPLE_CA
    assert (tls / "tls-key.pem").read_text() == SAMPLE_PRIVATE_KEY
    assert stat.S_IMODE((tls / "tls-key.pem").stat().st_mode) == 0o640
    assert stat.S_IMODE(tls.stat().st_mode) == 0o750


@pytest.mark.parametrize("secret, complaint", [
    ({"not-a-name": "value-123456"}, "not-a-name"),
    ({"LATMESH_AGENT_TOKEN": "line1\nline2-secretvalue"}, "LATMESH_AGENT_TOKEN"),
    ({"LATMESH_TLS_KEY_PEM": "no pem here secretvalue"}, "LATMESH_TLS_KEY_PEM"),
    ({"LATMESH_AGENT_TOKEN": 12345678}, "LATMESH_AGENT_TOKEN"),
    ({}, "non-empty"),
])
def test_secrets_helper_refuses_bad_secrets_without_printing_them(aws_stub, tmp_path, secret, complaint):
    proc = run_helper(aws_stub, tmp_path, secret)
    assert (tmp_path / "aws.log").exists(), "the stub aws was not the one called"
    assert proc.returncode == 1
    assert complaint in proc.stderr
    assert "secretvalue" not in proc.stderr and "value-123456" not in proc.stderr
    assert not (tmp_path / "etc/agent.env").exists()


def test_secrets_helper_retries_then_fails(aws_stub, tmp_path):
    proc = run_helper(dict(aws_stub, STUB_FAIL="1"), tmp_path, {"A": "b"}, "--attempts", "2")
    assert proc.returncode == 1
    assert "AccessDeniedException" in proc.stderr and "after 2 attempts" in proc.stderr
    assert len((tmp_path / "aws.log").read_text().splitlines()) == 2


# --------------------------------------------------------------------------------------------
# latmesh-bootstrap (with stub system commands: nothing on this machine is touched)


@pytest.fixture
def boot(tmp_path):
    bindir = tmp_path / "stubs"
    bindir.mkdir()
    log = tmp_path / "calls.log"
    payload = tmp_path / "payload"
    payload.write_bytes(b"\x7fELF fake latmesh binary\n")
    for name in ("systemd-sysusers", "systemctl"):
        stub(bindir, name, f'printf "%s\\n" "{name} $*" >>"$STUB_LOG"\n')
    for name in ("apt-get", "mount", "mkfs.ext4", "blkid", "mountpoint"):
        stub(bindir, name, f'printf "%s\\n" "{name} $*" >>"$STUB_LOG"; exit 97\n')
    stub(bindir, "curl", """\
        printf '%s\\n' "curl $*" >>"$STUB_LOG"
        while [ $# -gt 1 ]; do [ "$1" = --output ] && out=$2; shift; done
        cp "$STUB_PAYLOAD" "$out"
        """)
    stub(bindir, "aws", """\
        printf '%s\\n' "aws $* region=$AWS_DEFAULT_REGION" >>"$STUB_LOG"
        cp "$STUB_PAYLOAD" "${@: -1}"
        """)
    env = clean_env(bindir, tmp_path, STUB_LOG=str(log), STUB_PAYLOAD=str(payload))
    sha = subprocess.run(["sha256sum", str(payload)], capture_output=True, text=True).stdout.split()[0]
    dest = tmp_path / "usr/local/bin/latmesh-agent"

    def run(source="https://artifacts.example.com/latmesh-agent", digest=sha):
        proc = subprocess.run(
            ["bash", str(BOOTSTRAP), "--binary-source", source, "--binary-sha256", digest,
             "--binary-dest", str(dest), "--region", "eu-west-1", "--unit", "latmesh-agent.service"],
            capture_output=True, text=True, env=env, timeout=60)
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return proc, calls
    return run, dest, payload, sha


def test_bootstrap_installs_verified_binary_then_starts_the_unit(boot):
    run, dest, payload, _sha = boot
    proc, calls = run()
    assert proc.returncode == 0, proc.stderr
    assert dest.read_bytes() == payload.read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert [c.split()[0] for c in calls] == ["systemd-sysusers", "curl", "systemctl", "systemctl"]
    assert "--proto =https" in calls[1]
    assert calls[-2:] == ["systemctl daemon-reload", "systemctl enable --now latmesh-agent.service"]
    proc, calls = run()  # again: nothing downloaded
    assert proc.returncode == 0 and not any(c.startswith("curl") for c in calls)


def test_bootstrap_refuses_a_wrong_digest(boot):
    run, dest, _payload, _sha = boot
    proc, calls = run(digest="0" * 64)
    assert proc.returncode != 0 and "not installed" in proc.stderr
    assert not dest.exists()
    assert not list(dest.parent.iterdir()), "temporary download left behind"
    assert not any(c.startswith("systemctl enable") for c in calls)


def test_bootstrap_refuses_plain_http(boot):
    run, dest, _payload, _sha = boot
    proc, calls = run(source="http://artifacts.example.com/latmesh-agent")
    assert proc.returncode != 0 and not dest.exists()
    assert not any(c.startswith(("curl", "systemctl enable")) for c in calls)


def test_bootstrap_fetches_from_s3_with_the_region(boot):
    run, dest, payload, _sha = boot
    proc, calls = run(source="s3://my-bucket/latmesh/latmesh-agent")
    assert proc.returncode == 0, proc.stderr
    assert dest.read_bytes() == payload.read_bytes()
    assert any(c.startswith("aws s3 cp --only-show-errors s3://my-bucket/latmesh/latmesh-agent")
               and c.endswith("region=eu-west-1") for c in calls), calls


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="no shellcheck here")
@pytest.mark.parametrize("script", [BOOTSTRAP, REPO / "scripts" / "deploy-checks.sh"], ids=rel)
def test_shellcheck(script):
    proc = subprocess.run(["shellcheck", "-s", "bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_helper_scripts_are_executable_in_git_tree():
    for p in (BOOTSTRAP, SECRETS_HELPER):
        assert os.access(p, os.X_OK), f"{rel(p)} is not executable"


# --------------------------------------------------------------------------------------------
# Containerfiles


def workspace():
    """package name -> (crate dir, bin names) for every workspace member."""
    root = tomllib.loads((REPO / "Cargo.toml").read_text())
    out = {}
    for member in root["workspace"]["members"]:
        manifest = tomllib.loads((REPO / member / "Cargo.toml").read_text())
        bins = [b["name"] for b in manifest.get("bin", [])]
        out[manifest["package"]["name"]] = (member, bins)
    return out


def stages(path):
    """[(FROM line, [instructions])] with line continuations joined."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
        else:
            assert line.upper().startswith("ARG "), line
    return out


@pytest.mark.parametrize("name, package, binary", [
    ("Containerfile.agent", "latmesh-agent", "latmesh-agent"),
    ("Containerfile.coordinator", "latmesh-cli", "latmesh"),
])
def test_containerfile(name, package, binary):
    st = stages(CONTAINER / name)
    assert len(st) >= 2, "multi-stage"
    builder_from, builder = st[0]
    assert re.match(r"FROM \S*rust:\S+ AS builder$", builder_from), builder_from
    build = " ".join(i for i in builder if i.startswith("RUN "))
    assert f"-p {package} --bin {binary}" in build and "--locked" in build and "--release" in build
    assert binary in workspace()[package][1], f"{package} has no bin {binary}"
    final_from, final = st[-1]
    assert re.match(r"FROM (gcr\.io/distroless/cc-debian12\S*|\S*debian:bookworm-slim)$", final_from)
    users = [i.split()[1] for i in final if i.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0"), "runs as non-root"
    copies = [i for i in final if i.startswith("COPY ")]
    assert all("--from=builder" in c for c in copies), "the runtime stage gets files from the builder only"
    assert any(c.endswith(f"/usr/local/bin/{binary}") for c in copies)
    entry = [json.loads(i.split(" ", 1)[1]) for i in final if i.startswith("ENTRYPOINT ")]
    assert entry == [[f"/usr/local/bin/{binary}"]]
    if "bookworm-slim" in final_from:
        assert any("ca-certificates" in i for i in final)


def ignored(path, patterns):
    """Docker's .dockerignore semantics for plain patterns (no `!`): a path is excluded when
    it or one of its parent directories matches."""
    import fnmatch
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pat in patterns:
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:])):
                return True
    return False


def test_dockerignore_keeps_what_cargo_needs():
    files = sorted(CONTAINER.glob("*.dockerignore"))
    assert {f.name for f in files} == {"Containerfile.agent.dockerignore",
                                       "Containerfile.coordinator.dockerignore"}
    texts = {f.read_text() for f in files}
    assert len(texts) == 1, "the two ignore files differ"
    patterns = [line.strip() for line in texts.pop().splitlines() if line.strip() and not line.startswith("#")]
    assert not any(p.startswith("!") for p in patterns)
    for p in (".git", "target", ".latmesh"):
        assert ignored(p, patterns), p
    needed = ["Cargo.toml", "Cargo.lock"]
    for member, _bins in workspace().values():
        needed.append(f"{member}/Cargo.toml")
        needed += [rel(p) for p in (REPO / member).rglob("*.rs") if "target" not in p.parts]
    for crate in ("agent", "coordinator", "core", "proto", "sim", "tests"):
        for p in (REPO / crate).rglob("*.rs"):
            for inc in re.findall(r'include_(?:str|bytes)!\("([^"]+)"\)', p.read_text()):
                needed.append(os.path.relpath((p.parent / inc).resolve(), REPO))
    needed += [rel(p) for p in (REPO / "proto").rglob("*.proto")]
    excluded = [p for p in needed if ignored(p, patterns)]
    assert excluded == []
