output "coordinator_address" {
  description = "gRPC URL of the coordinator: the agents' LATMESH_COORDINATOR and the CLI's --coordinator."
  value       = module.coordinator.address
}

output "coordinator_instance_id" {
  description = "EC2 instance id of the coordinator."
  value       = module.coordinator.instance_id
}

output "agents" {
  description = "Every agent: region label, agent id, EC2 instance id, public IP."
  value = [
    for id in sort(keys(local.agent_regions)) : {
      region      = local.agent_regions[id]
      id          = id
      instance_id = local.agent_modules[id].instance_id
      public_ip   = local.agent_modules[id].public_ip
    }
  ]
}

output "campaign_regions" {
  description = "The region labels to list in a campaign's campaign.regions."
  value       = sort(distinct(values(local.agent_regions)))
}
