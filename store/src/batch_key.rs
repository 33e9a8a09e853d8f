//! Which batch rows belong to ([`BatchKey`]): campaign, agent, region, clock offset, seq and
//! the window labeller; the rows, the inserts and the insert fence all name batches by it.

/// Labels a coordinator-clock time (UTC µs) with its named window (e.g. `peak`), `""` for none.
pub type WindowLabel = dyn Fn(i64) -> String + Send + Sync;

/// Which batch rows belong to, and how to stamp them.
#[derive(Clone, Copy)]
pub struct BatchKey<'a> {
    /// Campaign id.
    pub campaign_id: &'a str,
    /// Agent id.
    pub agent_id: &'a str,
    /// The agent's region.
    pub region: &'a str,
    /// The batch's clock offset: coordinator clock − agent clock, µs.
    pub clock_offset_us: i64,
    /// The batch's sequence number (1, 2, … per campaign and agent).
    pub seq: u64,
    /// Window labeller; `None` stores `""`.
    pub window_label: Option<&'a WindowLabel>,
}

impl std::fmt::Debug for BatchKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchKey")
            .field("campaign_id", &self.campaign_id)
            .field("agent_id", &self.agent_id)
            .field("region", &self.region)
            .field("clock_offset_us", &self.clock_offset_us)
            .field("seq", &self.seq)
            .field("window_label", &self.window_label.is_some())
            .finish()
    }
}

impl<'a> BatchKey<'a> {
    /// A key without window labels.
    pub fn new(
        campaign_id: &'a str,
        agent_id: &'a str,
        region: &'a str,
        clock_offset_us: i64,
        seq: u64,
    ) -> Self {
        BatchKey {
            campaign_id,
            agent_id,
            region,
            clock_offset_us,
            seq,
            window_label: None,
        }
    }

    /// The same key, labelling rows with `label`.
    pub fn with_window_label(mut self, label: &'a WindowLabel) -> Self {
        self.window_label = Some(label);
        self
    }

    /// The window label of coordinator-clock time `coord_unix_us`.
    pub(crate) fn window_for(&self, coord_unix_us: i64) -> String {
        self.window_label
            .map(|f| f(coord_unix_us))
            .unwrap_or_default()
    }
}
