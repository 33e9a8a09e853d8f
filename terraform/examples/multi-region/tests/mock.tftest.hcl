# `terraform test` (Terraform >= 1.7) against mocked AWS providers: nothing is created and no
# credentials are needed, but the whole configuration is evaluated and "applied" with fake
# computed values: the region map, the module instances, the rendered cloud-init (checked
# with yamldecode against the repository's unit files), the security group rules, the
# outputs, and every validation and precondition.
#
#   terraform init -backend=false && terraform test
#
# scripts/deploy-checks.sh runs it where a terraform binary and the hashicorp/aws provider
# (a filesystem mirror) are available.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "us_east_1"

  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "us_west_2"

  mock_data "aws_region" {
    defaults = {
      name = "us-west-2"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "eu_west_1"

  mock_data "aws_region" {
    defaults = {
      name = "eu-west-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "eu_central_1"

  mock_data "aws_region" {
    defaults = {
      name = "eu-central-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "ap_southeast_1"

  mock_data "aws_region" {
    defaults = {
      name = "ap-southeast-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "ap_northeast_1"

  mock_data "aws_region" {
    defaults = {
      name = "ap-northeast-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "ap_south_1"

  mock_data "aws_region" {
    defaults = {
      name = "ap-south-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

mock_provider "aws" {
  alias = "sa_east_1"

  mock_data "aws_region" {
    defaults = {
      name = "sa-east-1"
    }
  }

  mock_data "aws_subnets" {
    defaults = {
      ids = ["subnet-0123456789abcdef0"]
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{}"
    }
  }

  mock_resource "aws_eip" {
    defaults = {
      public_ip = "198.51.100.10"
    }
  }

  mock_resource "aws_instance" {
    defaults = {
      public_ip = "198.51.100.20"
    }
  }
}

variables {
  agents = {
    "us-east-1"      = 1
    "eu-west-1"      = 2
    "ap-southeast-1" = 1
  }
  agent_secret_arn       = "arn:aws:secretsmanager:us-east-1:123456789012:secret:latmesh/agent-AbCdEf"
  coordinator_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:latmesh/coordinator-GhIjKl"
  agent_binary_url       = "https://artifacts.example.com/latmesh-agent"
  agent_binary_sha256    = "0000000000000000000000000000000000000000000000000000000000000000"
  latmesh_binary_url     = "https://artifacts.example.com/latmesh"
  latmesh_binary_sha256  = "1111111111111111111111111111111111111111111111111111111111111111"
  coordinator_dns_name   = "latmesh.example.com"
  operator_cidrs         = ["203.0.113.7/32"]
  install_clickhouse     = true
}

run "three_regions" {
  command = apply

  assert {
    condition     = output.coordinator_address == "https://latmesh.example.com:7700"
    error_message = "coordinator_address: ${output.coordinator_address}"
  }

  assert {
    condition     = [for a in output.agents : "${a.region}/${a.id}/${a.public_ip}"] == ["ap-southeast-1/ap-southeast-1-01/198.51.100.20", "eu-west-1/eu-west-1-01/198.51.100.20", "eu-west-1/eu-west-1-02/198.51.100.20", "us-east-1/us-east-1-01/198.51.100.20"]
    error_message = "agents: ${jsonencode(output.agents)}"
  }

  assert {
    condition     = jsonencode(output.campaign_regions) == jsonencode(["ap-southeast-1", "eu-west-1", "us-east-1"])
    error_message = "campaign_regions"
  }

  assert {
    condition     = length(module.agents_us_west_2) == 0 && length(module.agents_eu_west_1) == 2
    error_message = "module instances per region"
  }

  # The agent's user data installs the repository's unit byte for byte and names its
  # coordinator, region and id.
  assert {
    condition = {
      for f in yamldecode(module.agents_eu_west_1["eu-west-1-02"].user_data).write_files : f.path => f.content
    }["/etc/systemd/system/latmesh-agent.service"] == file("${path.module}/../../../deploy/systemd/latmesh-agent.service")
    error_message = "the agent unit in the user data differs from deploy/systemd/latmesh-agent.service"
  }

  assert {
    condition = {
      for f in yamldecode(module.agents_eu_west_1["eu-west-1-02"].user_data).write_files : f.path => f.content
    }["/etc/latmesh/agent.settings.env"] == "LATMESH_AGENT_ID=eu-west-1-02\nLATMESH_COORDINATOR=https://latmesh.example.com:7700\nLATMESH_REGION=eu-west-1\n"
    error_message = "agent settings"
  }

  assert {
    condition     = yamldecode(module.agents_eu_west_1["eu-west-1-02"].user_data).runcmd[0] == ["/usr/local/libexec/latmesh/latmesh-bootstrap", "--binary-source", "https://artifacts.example.com/latmesh-agent", "--binary-sha256", "0000000000000000000000000000000000000000000000000000000000000000", "--binary-dest", "/usr/local/bin/latmesh-agent", "--region", "eu-west-1", "--unit", "latmesh-agent.service"]
    error_message = "agent bootstrap command"
  }

  assert {
    condition     = !can(regex("(?m)^\\s*LATMESH_(AGENT|ADMIN)_TOKEN=", module.agents_eu_west_1["eu-west-1-02"].user_data))
    error_message = "a token assignment in the user data"
  }

  assert {
    condition = {
      for f in yamldecode(module.coordinator.user_data).write_files : f.path => f.content
    }["/etc/systemd/system/latmesh-coordinator.service"] == file("${path.module}/../../../deploy/systemd/latmesh-coordinator.service")
    error_message = "the coordinator unit in the user data differs from deploy/systemd/latmesh-coordinator.service"
  }

  assert {
    condition = {
      for f in yamldecode(module.coordinator.user_data).write_files : f.path => f.content
    }["/etc/latmesh/coordinator.settings.env"] == "LATMESH_CLICKHOUSE_URL=http://127.0.0.1:8123\nLATMESH_LISTEN=0.0.0.0:7700\n"
    error_message = "coordinator settings"
  }

  assert {
    condition     = contains(yamldecode(module.coordinator.user_data).runcmd[0], "--clickhouse") && contains(yamldecode(module.coordinator.user_data).runcmd[0], module.coordinator.state_volume_id)
    error_message = "coordinator bootstrap command"
  }

  assert {
    condition     = aws_vpc_security_group_ingress_rule.agent["eu-west-1-02"].cidr_ipv4 == "198.51.100.20/32" && aws_vpc_security_group_ingress_rule.agent["eu-west-1-02"].from_port == 7700
    error_message = "agent rule on the coordinator's security group"
  }
}

run "unsupported_region" {
  command = plan

  variables {
    agents = { "mars-north-1" = 1 }
  }

  expect_failures = [var.agents]
}
