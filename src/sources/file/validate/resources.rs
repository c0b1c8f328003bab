//! Resource requirement checks of the API server (`ValidateResourceRequirements`):
//! resource names, quantities never negative, requests at most their limits, and
//! extended resources (a domain-prefixed name outside `kubernetes.io/`) whole and
//! not overcommitted.
//!
//! Pure; used by `validate` for the containers and the pod-level resources of a
//! static pod.

use crate::api::pod::{
    ResourceRequirements, RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_HUGEPAGES_PREFIX,
    RESOURCE_MEMORY,
};
use crate::api::quantity::Quantity;

use super::meta::is_qualified_name;
use super::{invalid, Invalid};

/// True for a resource Kubernetes itself defines (no domain, or `kubernetes.io/`).
fn is_native(name: &str) -> bool {
    match name.split_once('/') {
        None => true,
        Some((domain, _)) => domain == "kubernetes.io" || domain.ends_with(".kubernetes.io"),
    }
}

fn check_name(field: &str, name: &str) -> Result<(), Invalid> {
    let known = [RESOURCE_CPU, RESOURCE_MEMORY, RESOURCE_EPHEMERAL_STORAGE].contains(&name)
        || name.starts_with(RESOURCE_HUGEPAGES_PREFIX);
    if known || (!is_native(name) && is_qualified_name(name)) {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "unsupported resource {name:?}: must be cpu, memory, ephemeral-storage, \
             hugepages-<size> or a domain-prefixed extended resource"
        ),
    ))
}

fn check_quantity(field: &str, q: &Quantity) -> Result<(), Invalid> {
    if q.is_negative() {
        return Err(invalid(
            field,
            format!("{q}: must be greater than or equal to 0"),
        ));
    }
    Ok(())
}

/// Checks `resources` found at `at` (e.g. `spec.containers[0].resources`).
pub fn validate_resources(at: &str, resources: &ResourceRequirements) -> Result<(), Invalid> {
    for (name, q) in &resources.limits {
        let field = format!("{at}.limits.{name}");
        check_name(&field, name)?;
        check_quantity(&field, q)?;
        if !is_native(name) && q.milli_value() % 1000 != 0 {
            return Err(invalid(field, format!("{q}: must be a whole number")));
        }
    }
    for (name, q) in &resources.requests {
        let field = format!("{at}.requests.{name}");
        check_name(&field, name)?;
        check_quantity(&field, q)?;
        let limit = resources.limits.get(name);
        if let Some(limit) = limit {
            if q > limit {
                return Err(invalid(
                    field,
                    format!("{q}: must be less than or equal to the {name} limit of {limit}"),
                ));
            }
        }
        if !is_native(name) {
            if q.milli_value() % 1000 != 0 {
                return Err(invalid(field, format!("{q}: must be a whole number")));
            }
            match limit {
                Some(limit) if limit == q => {}
                Some(limit) => {
                    return Err(invalid(
                        field,
                        format!("{q}: must equal the {name} limit of {limit} (not overcommitable)"),
                    ))
                }
                None => {
                    return Err(invalid(
                        format!("{at}.limits"),
                        format!("a limit must be set for {name} (not overcommitable)"),
                    ))
                }
            }
        }
    }
    Ok(())
}
