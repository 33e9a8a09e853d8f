output "address" {
  description = "Coordinator gRPC URL for agents (LATMESH_COORDINATOR) and the CLI (--coordinator): https://DNS_NAME_OR_ELASTIC_IP:PORT."
  value       = "https://${var.dns_name != null ? var.dns_name : aws_eip.coordinator.public_ip}:${var.grpc_port}"
}

output "public_ip" {
  description = "The Elastic IP of the coordinator."
  value       = aws_eip.coordinator.public_ip
}

output "private_ip" {
  description = "Private IPv4 address."
  value       = aws_instance.coordinator.private_ip
}

output "instance_id" {
  description = "EC2 instance id."
  value       = aws_instance.coordinator.id
}

output "security_group_id" {
  description = "The coordinator's security group; add ingress rules for grpc_port to it (the multi-region example adds one per agent)."
  value       = aws_security_group.coordinator.id
}

output "grpc_port" {
  description = "The gRPC port."
  value       = var.grpc_port
}

output "state_volume_id" {
  description = "EBS volume mounted on /var/lib/latmesh (campaign state, spool, ClickHouse data)."
  value       = aws_ebs_volume.state.id
}

output "iam_role_name" {
  description = "The instance role (reads the one secret, and the binary object when it comes from S3)."
  value       = aws_iam_role.coordinator.name
}

output "user_data" {
  description = "The rendered cloud-init user data (it holds no secret), as the instance gets it before gzip and base64."
  value       = local.user_data
}
