//! Component health for `/health`: each source and sink says whether it can make progress.
//!
//! A component that cannot make progress (broker unreachable for long, index read-only,
//! credentials rejected) reports itself unhealthy with the reason, so the job never looks
//! healthy while nothing is written.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ComponentLabels {
    pub component: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComponentStatus {
    pub healthy: bool,
    pub reason: String,
    pub since: SystemTime,
}

#[derive(Debug, Default)]
pub struct Health {
    components: Mutex<BTreeMap<String, ComponentStatus>>,
    /// 1 while a component is healthy, 0 while not: for alerts.
    pub gauge: Family<ComponentLabels, Gauge>,
}

impl Health {
    pub fn set_healthy(&self, component: &str) {
        self.set(component, true, String::new());
    }

    pub fn set_unhealthy(&self, component: &str, reason: impl Into<String>) {
        self.set(component, false, reason.into());
    }

    fn set(&self, component: &str, healthy: bool, reason: String) {
        let labels = ComponentLabels {
            component: component.to_owned(),
        };
        self.gauge.get_or_create(&labels).set(i64::from(healthy));
        let mut components = self.components.lock().expect("poisoned");
        match components.get_mut(component) {
            // Same state, other words (an outage can alternate two texts): `since` stays, and
            // only the reason is updated, quietly.
            Some(status) if status.healthy == healthy => {
                if status.reason != reason {
                    tracing::debug!(component, reason = %reason, "still unhealthy");
                    status.reason = reason;
                }
            }
            _ => {
                if healthy {
                    tracing::info!(component, "healthy");
                } else {
                    tracing::warn!(component, reason = %reason, "unhealthy");
                }
                components.insert(
                    component.to_owned(),
                    ComponentStatus {
                        healthy,
                        reason,
                        since: SystemTime::now(),
                    },
                );
            }
        }
    }

    /// Whether every component is healthy, and the report of each.
    pub fn report(&self) -> (bool, BTreeMap<String, ComponentStatus>) {
        let components = self.components.lock().expect("poisoned").clone();
        (components.values().all(|status| status.healthy), components)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unhealthy_component_makes_the_job_unhealthy() {
        let health = Health::default();
        health.set_healthy("kafka");
        assert!(health.report().0);
        health.set_unhealthy("elasticsearch", "index is read-only");
        let (healthy, components) = health.report();
        assert!(!healthy);
        assert_eq!(components["elasticsearch"].reason, "index is read-only");
        health.set_healthy("elasticsearch");
        assert!(health.report().0);
    }

    #[test]
    fn a_new_reason_for_the_same_state_keeps_since() {
        let health = Health::default();
        health.set_unhealthy("kafka", "no broker reachable");
        let since = health.report().1["kafka"].since;
        std::thread::sleep(std::time::Duration::from_millis(20));
        health.set_unhealthy("kafka", "no connection to any broker");
        let status = &health.report().1["kafka"];
        assert_eq!(status.reason, "no connection to any broker", "the newest reason shows");
        assert_eq!(status.since, since, "still the same outage");
        health.set_healthy("kafka");
        assert!(health.report().1["kafka"].since > since);
    }
}
