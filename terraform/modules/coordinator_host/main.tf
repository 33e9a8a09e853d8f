# The latmesh coordinator on one EC2 instance: Debian 12, an Elastic IP, gRPC reachable only
# from grpc_allowed_cidrs (plus SSH from ssh_cidrs), an EBS volume on /var/lib/latmesh for
# the campaign state (kept across instance replacements), optionally ClickHouse on the same
# host. The tokens and the TLS certificate and key come from one Secrets Manager secret,
# fetched by the unit's ExecStartPre helper at every start: never in user data or the repo.

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

  aws_region   = data.aws_region.current.name
  ami_id       = var.ami_id != null ? var.ami_id : data.aws_ami.debian12[0].id
  state_mount  = "/var/lib/latmesh"
  state_device = "/dev/sdf"

  binary_from_s3 = var.latmesh_binary_s3_bucket != null && var.latmesh_binary_s3_key != null
  binary_source = (
    local.binary_from_s3
    ? "s3://${coalesce(var.latmesh_binary_s3_bucket, "-")}/${coalesce(var.latmesh_binary_s3_key, "-")}"
    : coalesce(var.latmesh_binary_url, "-")
  )

  # Non-secret settings, written to /etc/latmesh/coordinator.settings.env.
  settings = merge(
    var.install_clickhouse ? { LATMESH_CLICKHOUSE_URL = "http://127.0.0.1:8123" } : {},
    var.extra_environment,
    { LATMESH_LISTEN = "0.0.0.0:${var.grpc_port}" },
  )
  settings_env = join("", [for k in sort(keys(local.settings)) : "${k}=${local.settings[k]}\n"])

  bootstrap_command = concat(
    ["/usr/local/libexec/latmesh/latmesh-bootstrap"],
    ["--binary-source", local.binary_source, "--binary-sha256", var.latmesh_binary_sha256],
    ["--binary-dest", "/usr/local/bin/latmesh", "--region", local.aws_region],
    ["--state-volume-id", aws_ebs_volume.state.id, "--state-device", local.state_device],
    ["--state-mount", local.state_mount],
    var.install_clickhouse ? ["--clickhouse"] : [],
    ["--unit", "latmesh-coordinator.service"],
  )

  # cloud-init.yaml.tftpl uses plain ${name} substitutions only; multi-line values are
  # indented here for their YAML block scalars (deploy/tests renders it the same way).
  user_data = templatefile("${path.module}/cloud-init.yaml.tftpl", {
    coordinator_unit  = indent(6, file("${local.repo_root}/deploy/systemd/latmesh-coordinator.service"))
    sysusers_conf     = indent(6, file("${local.repo_root}/deploy/systemd/latmesh.sysusers.conf"))
    secrets_helper    = indent(6, file("${local.repo_root}/deploy/systemd/latmesh-secrets-env"))
    bootstrap_script  = indent(6, file("${local.files}/latmesh-bootstrap"))
    settings_env      = indent(6, local.settings_env)
    secret_arn        = var.secret_arn
    bootstrap_command = jsonencode(local.bootstrap_command)
  })

  tags = merge(var.tags, { "latmesh:role" = "coordinator" })
}

resource "aws_security_group" "coordinator" {
  name_prefix = "${var.name_prefix}-coordinator-"
  description = "latmesh coordinator: gRPC from the allowed CIDRs only"
  vpc_id      = data.aws_subnet.selected.vpc_id
  tags        = merge(local.tags, { Name = "${var.name_prefix}-coordinator" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "grpc" {
  for_each          = toset(var.grpc_allowed_cidrs)
  security_group_id = aws_security_group.coordinator.id
  description       = "latmesh gRPC (agents, control CLI)"
  ip_protocol       = "tcp"
  from_port         = var.grpc_port
  to_port           = var.grpc_port
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "ssh" {
  for_each          = toset(var.ssh_cidrs)
  security_group_id = aws_security_group.coordinator.id
  description       = "SSH"
  ip_protocol       = "tcp"
  from_port         = 22
  to_port           = 22
  cidr_ipv4         = strcontains(each.value, ":") ? null : each.value
  cidr_ipv6         = strcontains(each.value, ":") ? each.value : null
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "all_ipv4" {
  security_group_id = aws_security_group.coordinator.id
  description       = "apt, S3, Secrets Manager, an external ClickHouse"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
  tags              = local.tags
}

resource "aws_vpc_security_group_egress_rule" "all_ipv6" {
  security_group_id = aws_security_group.coordinator.id
  description       = "apt, S3, Secrets Manager, an external ClickHouse"
  ip_protocol       = "-1"
  cidr_ipv6         = "::/0"
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

data "aws_iam_policy_document" "coordinator" {
  statement {
    sid       = "ReadTheCoordinatorSecret"
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
      sid       = "ReadTheLatmeshBinary"
      actions   = ["s3:GetObject"]
      resources = ["arn:${data.aws_partition.current.partition}:s3:::${var.latmesh_binary_s3_bucket}/${var.latmesh_binary_s3_key}"]
    }
  }
}

resource "aws_iam_role" "coordinator" {
  name_prefix        = "${var.name_prefix}-coordinator-"
  description        = "latmesh coordinator: reads its one secret"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "coordinator" {
  name   = "latmesh-coordinator"
  role   = aws_iam_role.coordinator.id
  policy = data.aws_iam_policy_document.coordinator.json
}

resource "aws_iam_instance_profile" "coordinator" {
  name_prefix = "${var.name_prefix}-coordinator-"
  role        = aws_iam_role.coordinator.name
  tags        = local.tags
}

# The address exists before the instance, so the TLS certificate can name it
# (terraform apply -target=module.coordinator.aws_eip.coordinator, then issue the certificate).
resource "aws_eip" "coordinator" {
  domain = "vpc"
  tags   = merge(local.tags, { Name = "${var.name_prefix}-coordinator" })
}

resource "aws_ebs_volume" "state" {
  availability_zone = data.aws_subnet.selected.availability_zone
  size              = var.state_volume_size_gb
  type              = "gp3"
  encrypted         = true
  tags              = merge(local.tags, { Name = "${var.name_prefix}-coordinator-state" })
}

resource "aws_instance" "coordinator" {
  ami                         = local.ami_id
  instance_type               = var.instance_type
  subnet_id                   = data.aws_subnet.selected.id
  vpc_security_group_ids      = [aws_security_group.coordinator.id]
  iam_instance_profile        = aws_iam_instance_profile.coordinator.name
  key_name                    = var.key_name
  associate_public_ip_address = true
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

  tags = merge(local.tags, { Name = "${var.name_prefix}-coordinator" })

  lifecycle {
    ignore_changes = [ami]

    precondition {
      condition     = (var.latmesh_binary_url != null) != (var.latmesh_binary_s3_bucket != null && var.latmesh_binary_s3_key != null)
      error_message = "Set exactly one binary source: latmesh_binary_url, or latmesh_binary_s3_bucket and latmesh_binary_s3_key."
    }

    precondition {
      condition     = length(base64gzip(local.user_data)) < 16384
      error_message = "The user data is over EC2's 16 KiB limit."
    }

    precondition {
      condition     = var.route53_zone_id == null || var.dns_name != null
      error_message = "route53_zone_id needs dns_name."
    }
  }
}

resource "aws_eip_association" "coordinator" {
  allocation_id = aws_eip.coordinator.id
  instance_id   = aws_instance.coordinator.id
}

# Attached after boot: latmesh-bootstrap waits for it, formats it only when blank, mounts it.
resource "aws_volume_attachment" "state" {
  device_name                    = local.state_device
  volume_id                      = aws_ebs_volume.state.id
  instance_id                    = aws_instance.coordinator.id
  stop_instance_before_detaching = true
}

resource "aws_route53_record" "coordinator" {
  count   = var.route53_zone_id != null && var.dns_name != null ? 1 : 0
  zone_id = var.route53_zone_id
  name    = var.dns_name
  type    = "A"
  ttl     = 300
  records = [aws_eip.coordinator.public_ip]
}
