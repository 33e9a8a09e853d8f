# One latmesh agent on one EC2 instance: Debian 12, no inbound traffic (unless ssh_cidrs),
# an instance role that can read exactly one secret, and cloud-init that installs the
# verified binary and the repository's systemd unit, then starts it. No secret is in any
# file of the repository or in the user data: the unit's ExecStartPre helper fetches the
# agent token and the providers' API keys from Secrets Manager at every start.

data "aws_region" "current" {}

data "aws_partition" "current" {}

data "aws_ami" "debian12" {
  count       = var.ami_id == null ? 1 : 0
  most_recent = true
  owners      = ["136693071363"] # Debian's official AWS account

  filter {
    name   = "name"
    values = ["debian-12-${var.architecture}-*"]
  }

  filter {
    name   = "architecture"
    values = [var.architecture == "arm64" ? "arm64" : "x86_64"]
  }

  filter {
    name   = "virtualization-type"
    values = ["hvm"]
  }
}

data "aws_vpc" "default" {
  count   = var.subnet_id == null ? 1 : 0
  default = true
}

data "aws_subnets" "default" {
  count = var.subnet_id == null ? 1 : 0

  filter {
    name   = "vpc-id"
    values = [data.aws_vpc.default[0].id]
  }

  filter {
    name   = "default-for-az"
    values = ["true"]
  }
}

data "aws_subnet" "selected" {
  id = var.subnet_id != null ? var.subnet_id : sort(data.aws_subnets.default[0].ids)[0]
}

locals {
  repo_root = "${path.module}/../../.."
  files     = "${path.module}/../../files"

  aws_region = data.aws_region.current.name
  region     = coalesce(var.region, local.aws_region)
  ami_id     = var.ami_id != null ? var.ami_id : data.aws_ami.debian12[0].id
  subnet_id  = data.aws_subnet.selected.id
  vpc_id     = data.aws_subnet.selected.vpc_id

  binary_from_s3 = var.agent_binary_s3_bucket != null && var.agent_binary_s3_key != null
  binary_source = (
    local.binary_from_s3
    ? "s3://${coalesce(var.agent_binary_s3_bucket, "-")}/${coalesce(var.agent_binary_s3_key, "-")}"
    : coalesce(var.agent_binary_url, "-")
  )

  # Non-secret settings, written to /etc/latmesh/agent.settings.env.
  settings = merge(var.extra_environment, {
    LATMESH_COORDINATOR = var.coordinator_address
    LATMESH_REGION      = local.region
    LATMESH_AGENT_ID    = var.agent_id
  })
  settings_env = join("", [for k in sort(keys(local.settings)) : "${k}=${local.settings[k]}\n"])

  bootstrap_command = concat(
    ["/usr/local/libexec/latmesh/latmesh-bootstrap"],
    ["--binary-source", local.binary_source, "--binary-sha256", var.agent_binary_sha256],
    ["--binary-dest", "/usr/local/bin/latmesh-agent", "--region", local.aws_region],
    ["--unit", "latmesh-agent.service"],
  )

  # cloud-init.yaml.tftpl uses plain ${name} substitutions only; multi-line values are
  # indented here for their YAML block scalars (deploy/tests renders it the same way).
  user_data = templatefile("${path.module}/cloud-init.yaml.tftpl", {
    agent_unit        = indent(6, file("${local.repo_root}/deploy/systemd/latmesh-agent.service"))
    sysusers_conf     = indent(6, file("${local.repo_root}/deploy/systemd/latmesh.sysusers.conf"))
    secrets_helper    = indent(6, file("${local.repo_root}/deploy/systemd/latmesh-secrets-env"))
    bootstrap_script  = indent(6, file("${local.files}/latmesh-bootstrap"))
    settings_env      = indent(6, local.settings_env)
    secret_arn        = var.secret_arn
    bootstrap_command = jsonencode(local.bootstrap_command)
  })

  tags = merge(var.tags, { "latmesh:role" = "agent", "latmesh:agent-id" = var.agent_id })
}

resource "aws_security_group" "agent" {
  name_prefix = "${var.name_prefix}-agent-"
  description = "latmesh agent ${var.agent_id}: egress only"
  vpc_id      = local.vpc_id
  tags        = merge(local.tags, { Name = "${var.name_prefix}-agent-${var.agent_id}" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "all_ipv4" {
  security_group_id = aws_security_group.agent.id
  description       = "providers (HTTPS), coordinator, apt, S3, Secrets Manager"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "all_ipv6" {
  security_group_id = aws_security_group.agent.id
  description       = "providers (HTTPS), coordinator, apt, S3, Secrets Manager"
  ip_protocol       = "-1"
  cidr_ipv6         = "::/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each          = toset(var.ssh_cidrs)
  security_group_id = aws_security_group.agent.id
  description       = "SSH"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "agent" {
  statement {
    sid       = "ReadTheAgentSecret"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.secret_arn]
  }

  dynamic "statement" {
    for_each = var.secret_kms_key_arn == null ? [] : [var.secret_kms_key_arn]

    content {
      sid       = "DecryptTheSecret"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["secretsmanager.${split(":", var.secret_arn)[3]}.amazonaws.com"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.binary_from_s3 ? [1] : []

    content {
      sid       = "ReadTheAgentBinary"
      actions   = ["s3:GetObject"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.agent_binary_s3_bucket}/${var.agent_binary_s3_key}"]
    }
  }
}

resource "aws_iam_role" "agent" {
  name_prefix        = "${var.name_prefix}-agent-"
  description        = "latmesh agent ${var.agent_id} (${local.aws_region}): reads its one secret"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "agent" {
  name   = "latmesh-agent"
  role   = aws_iam_role.agent.id
  policy = data.aws_iam_policy_document.agent.json
}

resource "aws_iam_instance_profile" "agent" {
  name_prefix = "${var.name_prefix}-agent-"
  role        = aws_iam_role.agent.name
  tags        = local.tags
}

resource "aws_instance" "agent" {
  ami                         = local.ami_id
  instance_type               = var.instance_type
  subnet_id                   = local.subnet_id
  vpc_security_group_ids      = [aws_security_group.agent.id]
  iam_instance_profile        = aws_iam_instance_profile.agent.name
  key_name                    = var.key_name
  associate_public_ip_address = var.associate_public_ip_address
  user_data_base64            = base64gzip(local.user_data)
  user_data_replace_on_change = true

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = var.root_volume_size_gb
    encrypted   = true
  }

  tags        = merge(local.tags, { Name = "${var.name_prefix}-agent-${var.agent_id}" })
  volume_tags = local.tags

  lifecycle {
    # A newer Debian image must not replace running agents on the next apply: replace
    # an instance on purpose (terraform apply -replace=...) to move it to a new image.
    ignore_changes = [ami]

    precondition {
      condition     = (var.agent_binary_url != null) != (var.agent_binary_s3_bucket != null && var.agent_binary_s3_key != null)
      error_message = "Set exactly one binary source: agent_binary_url, or agent_binary_s3_bucket and agent_binary_s3_key."
    }

    precondition {
      condition     = length(base64gzip(local.user_data)) < 16384
      error_message = "The user data is over EC2's 16 KiB limit."
    }
  }
}
