# latmesh in several AWS regions: one coordinator in var.home_region, var.agents[REGION]
# agents in each region (agents.tf), every agent's public IP allowed to the coordinator's
# gRPC port. The secrets exist beforehand in Secrets Manager (see ../../README.md); this
# configuration only grants each host read access to its own one.

locals {
  # The regions with a provider alias (providers.tf) and a module block (agents.tf).
  supported_regions = [
    "us-east-1",
    "us-west-2",
    "eu-west-1",
    "eu-central-1",
    "ap-southeast-1",
    "ap-northeast-1",
    "ap-south-1",
    "sa-east-1",
  ]

  # region => { agent id => index }, ids REGION-01, REGION-02, ...
  agent_ids = {
    for region, n in var.agents :
    region => { for i in range(n) : format("%s-%02d", region, i + 1) => i }
  }

  # agent id => region, over every region.
  agent_regions = merge([
    for region, ids in local.agent_ids : { for id, _ in ids : id => region }
  ]...)
}

module "coordinator" {
  source = "../../modules/coordinator_host"

  secret_arn               = var.coordinator_secret_arn
  secret_kms_key_arn       = var.secret_kms_key_arn
  latmesh_binary_url       = var.latmesh_binary_url
  latmesh_binary_s3_bucket = var.latmesh_binary_s3_bucket
  latmesh_binary_s3_key    = var.latmesh_binary_s3_key
  latmesh_binary_sha256    = var.latmesh_binary_sha256
  grpc_port                = var.grpc_port
  grpc_allowed_cidrs       = var.operator_cidrs
  dns_name                 = var.coordinator_dns_name
  route53_zone_id          = var.route53_zone_id
  instance_type            = var.coordinator_instance_type
  architecture             = var.architecture
  install_clickhouse       = var.install_clickhouse
  ssh_cidrs                = var.ssh_cidrs
  key_name                 = var.key_name
}

# Each agent's public address may reach the coordinator's gRPC port, and nothing else may
# (besides var.operator_cidrs). An agent stopped and started gets a new public IP: apply again.
resource "aws_vpc_security_group_ingress_rule" "agent" {
  for_each          = local.agent_regions
  security_group_id = module.coordinator.security_group_id
  description       = "latmesh agent ${each.key} (${each.value})"
  ip_protocol       = "tcp"
  from_port         = var.grpc_port
  to_port           = var.grpc_port
  cidr_ipv4         = "${local.agent_modules[each.key].public_ip}/32"
}
