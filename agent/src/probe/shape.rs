//! The request shape applied to a JSON body built in an API's own terms: the provider's
//! output-cap field and its `extra_body` keys ([`apply_shape`]). Every API's body goes
//! through it (`super::request`, `super::anthropic`, `super::responses`).

use latmesh_core::api::{Api, RequestShape};

/// The output cap's field of `api` when the provider names none: `max_tokens` (chat,
/// anthropic), `max_output_tokens` (responses).
pub fn default_max_tokens_field(api: Api) -> &'static str {
    match api {
        Api::Responses => "max_output_tokens",
        Api::Chat | Api::Anthropic => "max_tokens",
    }
}

/// Shapes a JSON body built in the API's own terms: the output cap moves from the API's
/// field ([`default_max_tokens_field`]) to the provider's `max_tokens_field`, then every
/// top-level key of `extra_body` (the scenario's merged under the provider's by the runner,
/// [`latmesh_core::shaping::with_scenario_body`]) replaces the body's own. Every API's body
/// goes through it.
pub fn apply_shape(body: &mut serde_json::Map<String, serde_json::Value>, shape: &RequestShape) {
    if let Some(field) = &shape.max_tokens_field
        && let Some(cap) = body.remove(default_max_tokens_field(shape.api))
    {
        body.insert(field.clone(), cap);
    }
    for (k, v) in &shape.extra_body {
        body.insert(k.clone(), v.clone());
    }
}
