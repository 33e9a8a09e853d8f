variable "home_region" {
  description = "AWS region of the coordinator (and where the secrets usually live)."
  type        = string
  default     = "us-east-1"
}

variable "agents" {
  description = "Agents per AWS region, e.g. { \"us-east-1\" = 1, \"eu-west-1\" = 1 }. Regions must be among those with a provider alias in providers.tf (see local.supported_regions); 0 or absent: none. Agent ids are REGION-NN (us-east-1-01, ...) and the region label each reports is the AWS region name, so campaign files list e.g. regions = [\"us-east-1\", \"eu-west-1\"]."
  type        = map(number)

  validation {
    condition = alltrue([for r, n in var.agents : contains([
      "us-east-1", "us-west-2", "eu-west-1", "eu-central-1",
      "ap-southeast-1", "ap-northeast-1", "ap-south-1", "sa-east-1",
    ], r)])
    error_message = "agents: a region without a provider alias in providers.tf (supported: us-east-1, us-west-2, eu-west-1, eu-central-1, ap-southeast-1, ap-northeast-1, ap-south-1, sa-east-1)."
  }

  validation {
    condition     = alltrue([for r, n in var.agents : n >= 0 && n <= 20 && floor(n) == n])
    error_message = "agents: counts are whole numbers from 0 to 20."
  }
}

variable "agent_secret_arn" {
  description = "Secrets Manager secret every agent reads: JSON with LATMESH_AGENT_TOKEN, the providers' API key variables, and LATMESH_CA_PEM for a private CA. May live in any region (usually home_region)."
  type        = string
}

variable "coordinator_secret_arn" {
  description = "Secrets Manager secret the coordinator reads: JSON with LATMESH_AGENT_TOKEN (the same token), LATMESH_ADMIN_TOKEN, LATMESH_TLS_CERT_PEM and LATMESH_TLS_KEY_PEM. Agents cannot read it."
  type        = string
}

variable "secret_kms_key_arn" {
  description = "Customer-managed KMS key of both secrets, if any (null: the AWS-managed key)."
  type        = string
  default     = null
}

variable "agent_binary_url" {
  description = "https:// URL of the latmesh-agent binary (or use agent_binary_s3_bucket/agent_binary_s3_key)."
  type        = string
  default     = null
}

variable "agent_binary_s3_bucket" {
  description = "S3 bucket of the latmesh-agent binary; agents in every region read it (cross-region)."
  type        = string
  default     = null
}

variable "agent_binary_s3_key" {
  description = "S3 object key of the latmesh-agent binary."
  type        = string
  default     = null
}

variable "agent_binary_sha256" {
  description = "sha256 of the latmesh-agent binary."
  type        = string
}

variable "latmesh_binary_url" {
  description = "https:// URL of the `latmesh` (coordinator) binary (or use latmesh_binary_s3_bucket/latmesh_binary_s3_key)."
  type        = string
  default     = null
}

variable "latmesh_binary_s3_bucket" {
  description = "S3 bucket of the `latmesh` binary."
  type        = string
  default     = null
}

variable "latmesh_binary_s3_key" {
  description = "S3 object key of the `latmesh` binary."
  type        = string
  default     = null
}

variable "latmesh_binary_sha256" {
  description = "sha256 of the `latmesh` binary."
  type        = string
}

variable "coordinator_dns_name" {
  description = "Name in the coordinator's TLS certificate that agents connect to; null: the Elastic IP (then the certificate needs it as an IP SAN)."
  type        = string
  default     = null
}

variable "route53_zone_id" {
  description = "Route 53 zone in which to create coordinator_dns_name (null: manage DNS yourself)."
  type        = string
  default     = null
}

variable "operator_cidrs" {
  description = "CIDR blocks of the operators who run `latmesh campaign ...` against the coordinator; each agent's public IP is allowed on its own."
  type        = list(string)
  default     = []
}

variable "ssh_cidrs" {
  description = "CIDR blocks allowed to SSH to every host (default: none)."
  type        = list(string)
  default     = []
}

variable "key_name" {
  description = "EC2 key pair name for SSH; key pairs are per region, so it must exist under this name in every region used."
  type        = string
  default     = null
}

variable "agent_instance_type" {
  description = "Instance type of the agents."
  type        = string
  default     = "t3.small"
}

variable "coordinator_instance_type" {
  description = "Instance type of the coordinator."
  type        = string
  default     = "t3.medium"
}

variable "architecture" {
  description = "\"amd64\" or \"arm64\", for every host: the instance types and both binaries must match."
  type        = string
  default     = "amd64"
}

variable "install_clickhouse" {
  description = "Run ClickHouse on the coordinator host (results stored, `latmesh query ...` works there)."
  type        = bool
  default     = false
}

variable "grpc_port" {
  description = "The coordinator's gRPC port."
  type        = number
  default     = 7700
}

variable "tags" {
  description = "Tags on every resource (provider default_tags)."
  type        = map(string)
  default     = { project = "latmesh" }
}
