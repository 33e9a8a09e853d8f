//! A stored campaign's own rows: its `campaigns` row ([`campaign`]) with its plan
//! ([`stored_plan`]) and time windows ([`stored_window_spec`]), and its agents ([`agents`]).

use latmesh_core::plan::Plan;
use latmesh_core::windows::WindowSpec;

use super::super::rows::{AgentRow, CampaignRow};
use super::super::{StoreError, check_identifier};

/// The stored campaign `campaign_id` (its latest row), if any.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn campaign(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<CampaignRow>, StoreError> {
    check_identifier(db)?;
    Ok(client
        .query(&format!(
            "SELECT ?fields FROM {db}.campaigns WHERE campaign_id = ? \
             ORDER BY launched_at_us DESC LIMIT 1"
        ))
        .bind(campaign_id)
        .fetch_optional()
        .await?)
}

/// The latest state of every agent of campaign `campaign_id`, by agent id.
///
/// # Errors
/// [`StoreError::InvalidName`] for a bad `db`; the server's or connection's error otherwise.
pub async fn agents(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Vec<AgentRow>, StoreError> {
    check_identifier(db)?;
    Ok(client
        .query(&format!(
            "SELECT ?fields FROM {db}.agents WHERE campaign_id = ? \
             ORDER BY agent_id, seen_at_us DESC LIMIT 1 BY agent_id"
        ))
        .bind(campaign_id)
        .fetch_all()
        .await?)
}

/// The windows of the stored campaign `campaign_id`, from its plan; `None` when the campaign
/// is not stored.
///
/// # Errors
/// The server's or connection's error; [`StoreError::Rejected`] for a stored plan that does
/// not parse.
pub async fn stored_window_spec(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<WindowSpec>, StoreError> {
    let Some(plan) = stored_plan(client, db, campaign_id).await? else {
        return Ok(None);
    };
    WindowSpec::from_plan(&plan)
        .map(Some)
        .map_err(|e| StoreError::Rejected {
            code: None,
            message: format!("stored plan of campaign {campaign_id:?}: {e}"),
        })
}

/// The plan of the stored campaign `campaign_id`; `None` when the campaign is not stored.
///
/// # Errors
/// The server's or connection's error; [`StoreError::Rejected`] for a stored plan that does
/// not parse.
pub async fn stored_plan(
    client: &clickhouse::Client,
    db: &str,
    campaign_id: &str,
) -> Result<Option<Plan>, StoreError> {
    let Some(row) = campaign(client, db, campaign_id).await? else {
        return Ok(None);
    };
    serde_json::from_str(&row.plan_json)
        .map(Some)
        .map_err(|e| StoreError::Rejected {
            code: None,
            message: format!("stored plan of campaign {campaign_id:?}: {e}"),
        })
}
