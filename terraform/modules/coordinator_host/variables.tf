variable "secret_arn" {
  description = "ARN of the one Secrets Manager secret the coordinator may read: a JSON object with LATMESH_AGENT_TOKEN, LATMESH_ADMIN_TOKEN, LATMESH_TLS_CERT_PEM (chain, leaf first) and LATMESH_TLS_KEY_PEM. Fetched at every service start; never put in user data."
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

variable "latmesh_binary_url" {
  description = "https:// URL of the `latmesh` binary (Linux, the instance's architecture). Set this or latmesh_binary_s3_bucket/latmesh_binary_s3_key."
  type        = string
  default     = null

  validation {
    condition     = var.latmesh_binary_url == null || can(regex("^https://[^\\s\"]+$", var.latmesh_binary_url))
    error_message = "latmesh_binary_url: an https:// URL without spaces or quotes."
  }
}

variable "latmesh_binary_s3_bucket" {
  description = "S3 bucket holding the `latmesh` binary (with latmesh_binary_s3_key); the instance role may read that one object."
  type        = string
  default     = null
}

variable "latmesh_binary_s3_key" {
  description = "S3 object key of the `latmesh` binary in latmesh_binary_s3_bucket."
  type        = string
  default     = null
}

variable "latmesh_binary_sha256" {
  description = "sha256 of the `latmesh` binary (64 lowercase hex digits); a download that differs is not installed and the coordinator is not started."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.latmesh_binary_sha256))
    error_message = "latmesh_binary_sha256: 64 lowercase hex digits."
  }
}

variable "grpc_port" {
  description = "TCP port the coordinator serves gRPC on (agents and the control CLI)."
  type        = number
  default     = 7700

  validation {
    condition     = var.grpc_port >= 1 && var.grpc_port <= 65535 && floor(var.grpc_port) == var.grpc_port
    error_message = "grpc_port: 1 to 65535."
  }
}

variable "grpc_allowed_cidrs" {
  description = "CIDR blocks (IPv4 or IPv6) allowed to reach grpc_port: the agents' egress addresses (the multi-region example adds each agent's /32 itself) and the operators running `latmesh campaign ...`. [\"0.0.0.0/0\", \"::/0\"] opens it to anyone (TLS and the tokens still apply)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.grpc_allowed_cidrs : can(cidrhost(c, 0))])
    error_message = "grpc_allowed_cidrs: every entry must be a CIDR block such as 203.0.113.7/32."
  }
}

variable "dns_name" {
  description = "DNS name agents and operators use for the coordinator; it must be in the TLS certificate (a SAN). null: the Elastic IP is the address (then the certificate needs that IP as a SAN)."
  type        = string
  default     = null

  validation {
    condition     = var.dns_name == null || can(regex("^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$", var.dns_name))
    error_message = "dns_name: a host name such as coord.example.com."
  }
}

variable "route53_zone_id" {
  description = "Route 53 hosted zone in which to create dns_name as an A record pointing at the Elastic IP; null: manage DNS yourself."
  type        = string
  default     = null
}

variable "instance_type" {
  description = "EC2 instance type. Its architecture must be var.architecture."
  type        = string
  default     = "t3.medium"
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
  description = "Subnet for the instance and, in its availability zone, the state volume; null: the default subnet of the default VPC in one availability zone. Needs a route to the internet (apt, S3, Secrets Manager, the Elastic IP)."
  type        = string
  default     = null
}

variable "ssh_cidrs" {
  description = "CIDR blocks (IPv4 or IPv6) allowed to reach TCP 22. Empty (the default): only grpc_port is reachable."
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
  description = "Root volume size, GiB (gp3, encrypted)."
  type        = number
  default     = 16

  validation {
    condition     = var.root_volume_size_gb >= 8
    error_message = "root_volume_size_gb: at least 8."
  }
}

variable "state_volume_size_gb" {
  description = "Size of the EBS volume mounted on /var/lib/latmesh, GiB: campaign state (every acked batch), the ClickHouse spool and, with install_clickhouse, ClickHouse's data. It outlives instance replacements; terraform destroy deletes it."
  type        = number
  default     = 50

  validation {
    condition     = var.state_volume_size_gb >= 1
    error_message = "state_volume_size_gb: at least 1."
  }
}

variable "install_clickhouse" {
  description = "Install Debian's ClickHouse (18.16) on the host, data on the state volume, loopback only, and point the coordinator at it (LATMESH_CLICKHOUSE_URL=http://127.0.0.1:8123)."
  type        = bool
  default     = false
}

variable "extra_environment" {
  description = "More non-secret settings for /etc/latmesh/coordinator.settings.env, e.g. { LATMESH_LOG = \"info\", LATMESH_CLICKHOUSE_URL = \"http://clickhouse.internal:8123\" }. Never tokens: those belong in the secret."
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
  description = "Prefix of the names of the instance, security group, volume and IAM role."
  type        = string
  default     = "latmesh"
}

variable "tags" {
  description = "Tags added to every resource of the module."
  type        = map(string)
  default     = {}
}
