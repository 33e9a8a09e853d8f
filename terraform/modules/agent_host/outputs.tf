output "agent_id" {
  description = "The agent id (LATMESH_AGENT_ID)."
  value       = var.agent_id
}

output "region" {
  description = "The region label the agent reports (LATMESH_REGION)."
  value       = local.region
}

output "aws_region" {
  description = "The AWS region the instance runs in."
  value       = local.aws_region
}

output "instance_id" {
  description = "EC2 instance id."
  value       = aws_instance.agent.id
}

output "public_ip" {
  description = "Public IPv4 address (null without one): the source address the coordinator and the providers see."
  value       = aws_instance.agent.public_ip
}

output "private_ip" {
  description = "Private IPv4 address."
  value       = aws_instance.agent.private_ip
}

output "security_group_id" {
  description = "The agent's security group (egress only, plus SSH from ssh_cidrs)."
  value       = aws_security_group.agent.id
}

output "iam_role_name" {
  description = "The instance role (reads the one secret, and the binary object when it comes from S3)."
  value       = aws_iam_role.agent.name
}

output "user_data" {
  description = "The rendered cloud-init user data (it holds no secret), as the instance gets it before gzip and base64."
  value       = local.user_data
}
