terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.30.0, < 7.0.0"
    }
  }

  # Keep the state somewhere shared and locked for real use, e.g.:
  # backend "s3" {
  #   bucket         = "my-terraform-state"
  #   key            = "latmesh/multi-region.tfstate"
  #   region         = "us-east-1"
  #   dynamodb_table = "terraform-locks"
  # }
}
