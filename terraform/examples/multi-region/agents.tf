# One module block per supported region: a module's provider cannot come from for_each, so
# each region's agents (var.agents["REGION"] of them) are a for_each of their own block.
# Adding a region: a provider alias in providers.tf, a block here, an entry in
# local.agent_modules below and in local.supported_regions (main.tf), and in the validation
# of var.agents (variables.tf).

module "agents_us_east_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "us-east-1", {})
  providers = {
    aws = aws.us_east_1
  }

  agent_id               = each.key
  region                 = "us-east-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_us_west_2" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "us-west-2", {})
  providers = {
    aws = aws.us_west_2
  }

  agent_id               = each.key
  region                 = "us-west-2"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_eu_west_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "eu-west-1", {})
  providers = {
    aws = aws.eu_west_1
  }

  agent_id               = each.key
  region                 = "eu-west-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_eu_central_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "eu-central-1", {})
  providers = {
    aws = aws.eu_central_1
  }

  agent_id               = each.key
  region                 = "eu-central-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_ap_southeast_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "ap-southeast-1", {})
  providers = {
    aws = aws.ap_southeast_1
  }

  agent_id               = each.key
  region                 = "ap-southeast-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_ap_northeast_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "ap-northeast-1", {})
  providers = {
    aws = aws.ap_northeast_1
  }

  agent_id               = each.key
  region                 = "ap-northeast-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_ap_south_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "ap-south-1", {})
  providers = {
    aws = aws.ap_south_1
  }

  agent_id               = each.key
  region                 = "ap-south-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

module "agents_sa_east_1" {
  source   = "../../modules/agent_host"
  for_each = lookup(local.agent_ids, "sa-east-1", {})
  providers = {
    aws = aws.sa_east_1
  }

  agent_id               = each.key
  region                 = "sa-east-1"
  coordinator_address    = module.coordinator.address
  secret_arn             = var.agent_secret_arn
  secret_kms_key_arn     = var.secret_kms_key_arn
  agent_binary_url       = var.agent_binary_url
  agent_binary_s3_bucket = var.agent_binary_s3_bucket
  agent_binary_s3_key    = var.agent_binary_s3_key
  agent_binary_sha256    = var.agent_binary_sha256
  instance_type          = var.agent_instance_type
  architecture           = var.architecture
  ssh_cidrs              = var.ssh_cidrs
  key_name               = var.key_name
}

locals {
  # agent id => the agent_host module instance, over every region.
  agent_modules = merge(
    module.agents_us_east_1,
    module.agents_us_west_2,
    module.agents_eu_west_1,
    module.agents_eu_central_1,
    module.agents_ap_southeast_1,
    module.agents_ap_northeast_1,
    module.agents_ap_south_1,
    module.agents_sa_east_1,
  )
}
