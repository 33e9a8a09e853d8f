variable "agent_id" {
  description = "Stable agent id (LATMESH_AGENT_ID), unique per coordinator, e.g. \"eu-west-1-01\". Keep it across instance replacements: the agent's spool and the coordinator's bookkeeping are per id."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", var.agent_id))
    error_message = "agent_id: 1 to 63 characters out of letters, digits, '.', '_' and '-', starting with a letter or digit."
  }
}

variable "region" {
  description = "Region label the agent reports (LATMESH_REGION); campaign files list these names in campaign.regions. null: the AWS region name of the provider, e.g. \"eu-west-1\"."
  type        = string
  default     = null

  validation {
    condition     = var.region == null || can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", var.region))
    error_message = "region: 1 to 63 characters out of letters, digits, '.', '_' and '-'."
  }
}

variable "coordinator_address" {
  description = "Coordinator gRPC URL the agent connects to (LATMESH_COORDINATOR), e.g. \"https://coord.example.com:7700\"; its host must be a name or IP in the coordinator certificate."
  type        = string

  validation {
    condition     = can(regex("^https?://[A-Za-z0-9.:\\[\\]-]+(:[0-9]{1,5})?$", var.coordinator_address))
    error_message = "coordinator_address: https://HOST:PORT (http:// only for a plaintext coordinator on a private network)."
  }
}

variable "secret_arn" {
  description = "ARN of the one Secrets Manager secret this agent may read: a JSON object with LATMESH_AGENT_TOKEN, every provider API key variable the campaigns name, and optionally LATMESH_CA_PEM (the coordinator's private CA). Fetched at every service start; never put in user data."
  type        = string

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$", var.secret_arn))
    error_message = "secret_arn: a full Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-XXXXXX)."
  }
}

variable "secret_kms_key_arn" {
  description = "ARN of the customer-managed KMS key that encrypts the secret, to allow kms:Decrypt through Secrets Manager; null when the secret uses the AWS-managed key aws/secretsmanager."
  type        = string
  default     = null
}

variable "agent_binary_url" {
  description = "https:// URL of the latmesh-agent binary (Linux, the instance's architecture). Set this or agent_binary_s3_bucket/agent_binary_s3_key."
  type        = string
  default     = null

  validation {
    condition     = var.agent_binary_url == null || can(regex("^https://[^\\s\"]+$", var.agent_binary_url))
    error_message = "agent_binary_url: an https:// URL without spaces or quotes."
  }
}

variable "agent_binary_s3_bucket" {
  description = "S3 bucket holding the latmesh-agent binary (with agent_binary_s3_key); the instance role may read that one object."
  type        = string
  default     = null
}

variable "agent_binary_s3_key" {
  description = "S3 object key of the latmesh-agent binary in agent_binary_s3_bucket, e.g. \"latmesh/0.1.0/x86_64/latmesh-agent\"."
  type        = string
  default     = null
}

variable "agent_binary_sha256" {
  description = "sha256 of the latmesh-agent binary (64 lowercase hex digits, as printed by sha256sum); a download that differs is not installed and the agent is not started."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.agent_binary_sha256))
    error_message = "agent_binary_sha256: 64 lowercase hex digits."
  }
}

variable "instance_type" {
  description = "EC2 instance type. Its architecture must be var.architecture (t3/c7i: amd64, t4g/c7g: arm64)."
  type        = string
  default     = "t3.small"
}

variable "architecture" {
  description = "CPU architecture of the AMI and the binary: \"amd64\" or \"arm64\"."
  type        = string
  default     = "amd64"

  validation {
    condition     = contains(["amd64", "arm64"], var.architecture)
    error_message = "architecture: \"amd64\" or \"arm64\"."
  }
}

variable "ami_id" {
  description = "AMI to boot instead of the newest official Debian 12 image (looked up by a data source, owner 136693071363); it must be Debian 12 with cloud-init."
  type        = string
  default     = null
}

variable "subnet_id" {
  description = "Subnet for the instance; null: the default subnet of the default VPC in one availability zone. It needs a route to the internet (a public subnet, or NAT) for the providers, apt, S3 and Secrets Manager."
  type        = string
  default     = null
}

variable "associate_public_ip_address" {
  description = "Give the instance a public IPv4 address (needed in a public subnet without NAT; its address is what the coordinator sees)."
  type        = bool
  default     = true
}

variable "ssh_cidrs" {
  description = "CIDR blocks (IPv4 or IPv6) allowed to reach TCP 22. Empty (the default): nothing may connect to the instance at all; use SSM or the serial console."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.ssh_cidrs : can(cidrhost(c, 0))])
    error_message = "ssh_cidrs: every entry must be a CIDR block such as 203.0.113.7/32."
  }
}

variable "key_name" {
  description = "EC2 key pair name for SSH (only useful with ssh_cidrs); null: none."
  type        = string
  default     = null
}

variable "root_volume_size_gb" {
  description = "Root volume size, GiB (gp3, encrypted); holds the agent's spool (bounded by LATMESH_AGENT_SPOOL_MAX_MIB, default 1024 MiB)."
  type        = number
  default     = 16

  validation {
    condition     = var.root_volume_size_gb >= 8
    error_message = "root_volume_size_gb: at least 8."
  }
}

variable "extra_environment" {
  description = "More non-secret settings for /etc/latmesh/agent.settings.env, e.g. { LATMESH_LOG = \"debug\", LATMESH_AGENT_SPOOL_MAX_MIB = \"2048\", LATMESH_AGENT_HEARTBEAT_S = \"5\" }. Never keys or tokens: those belong in the secret."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for k, v in var.extra_environment :
      can(regex("^[A-Za-z_][A-Za-z0-9_]*$", k)) && can(regex("^[A-Za-z0-9._:/@%+=,-]*$", v))
    ])
    error_message = "extra_environment: keys must be variable names, values out of letters, digits and ._:/@%+=,- only."
  }
}

variable "name_prefix" {
  description = "Prefix of the names of the instance, security group and IAM role."
  type        = string
  default     = "latmesh"
}

variable "tags" {
  description = "Tags added to every resource of the module."
  type        = map(string)
  default     = {}
}
