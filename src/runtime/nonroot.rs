//! `runAsNonRoot` against the image's user (upstream `verifyRunAsNonRoot`). Pure: the
//! caller asks the runtime for the image's user (CRI ImageStatus, not verbose) only
//! when [`needs_image_user`] says so, and turns a refusal into the container's
//! `CreateContainerConfigError`.
//!
//! An explicit `runAsUser` decides alone (0 is refused). Otherwise the image's uid
//! decides; an image with a user name only cannot be verified and is refused, unless
//! the name is a number (litelet reads it as the uid; containerd already does so);
//! an image with no user at all runs as root and is refused.

use crate::api::pod::{Container, Pod};
use crate::images::manager::ImageUser;

/// The effective `runAsNonRoot` and `runAsUser` (the container's win over the pod's).
fn effective(pod: &Pod, container: &Container) -> (bool, Option<i64>) {
    let pod_sc = pod.spec.security_context.as_ref();
    let sc = container.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod_sc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    let user = sc
        .and_then(|s| s.run_as_user)
        .or(pod_sc.and_then(|s| s.run_as_user));
    (non_root, user)
}

/// True when the check needs the image's user: `runAsNonRoot` without `runAsUser`.
pub fn needs_image_user(pod: &Pod, container: &Container) -> bool {
    matches!(effective(pod, container), (true, None))
}

/// Why a container that must not run as root is refused; the messages are upstream's.
/// `who` names the pod and container.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NonRootError {
    #[error("container's runAsUser breaks non-root policy {who}")]
    RunAsUserRoot { who: String },
    #[error("container has runAsNonRoot and image will run as root {who}")]
    ImageRoot { who: String },
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({name}), cannot verify user is non-root {who}"
    )]
    NonNumericUser { name: String, who: String },
}

/// Refuses a container that must not run as root but would; the message is
/// upstream's. `image` is only read when [`needs_image_user`] is true.
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
) -> Result<(), NonRootError> {
    let (non_root, user) = effective(pod, container);
    if !non_root {
        return Ok(());
    }
    let who = format!(
        "(pod: \"{}_{}({})\", container: {})",
        pod.name(),
        pod.namespace(),
        pod.uid(),
        container.name
    );
    if let Some(user) = user {
        return match user {
            0 => Err(NonRootError::RunAsUserRoot { who }),
            _ => Ok(()),
        };
    }
    let numeric = image
        .username
        .split(':')
        .next()
        .and_then(|u| u.parse::<i64>().ok());
    match (image.uid.or(numeric), image.username.as_str()) {
        (Some(0), _) | (None, "") => Err(NonRootError::ImageRoot { who }),
        (Some(_), _) => Ok(()),
        (None, name) => Err(NonRootError::NonNumericUser {
            name: name.to_owned(),
            who,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::pod::{PodSecurityContext, SecurityContext};

    fn pod(non_root: Option<bool>, user: Option<i64>) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u1".into());
        pod.spec.containers.push(Container {
            name: "app".into(),
            security_context: Some(SecurityContext {
                run_as_non_root: non_root,
                run_as_user: user,
                ..Default::default()
            }),
            ..Default::default()
        });
        pod
    }

    fn image(uid: Option<i64>, username: &str) -> ImageUser {
        ImageUser {
            uid,
            username: username.into(),
        }
    }

    /// `want`: `None` allowed, else the start of the refusal.
    fn check(name: &str, pod: Pod, image: ImageUser, want: Option<&str>) {
        let got = verify_run_as_non_root(&pod, &pod.spec.containers[0], &image);
        match want {
            None => assert_eq!(got, Ok(()), "{name}"),
            Some(prefix) => {
                let message = got.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(message.starts_with(prefix), "{name}: {message}");
                assert!(
                    message.ends_with("(pod: \"web_ns(u1)\", container: app)"),
                    "{name}: {message}"
                );
            }
        }
    }

    #[test]
    fn verify_run_as_non_root_table() {
        let root = "container has runAsNonRoot and image will run as root";
        check(
            "image uid 0",
            pod(Some(true), None),
            image(Some(0), ""),
            Some(root),
        );
        check(
            "image uid 1000",
            pod(Some(true), None),
            image(Some(1000), ""),
            None,
        );
        check(
            "image username root",
            pod(Some(true), None),
            image(None, "root"),
            Some("container has runAsNonRoot and image has non-numeric user (root), cannot verify user is non-root"),
        );
        check(
            "numeric username",
            pod(Some(true), None),
            image(None, "1000"),
            None,
        );
        check(
            "numeric username 0",
            pod(Some(true), None),
            image(None, "0:0"),
            Some(root),
        );
        check(
            "image without user",
            pod(Some(true), None),
            image(None, ""),
            Some(root),
        );
        check(
            "runAsUser 1000 wins over a root image",
            pod(Some(true), Some(1000)),
            image(Some(0), ""),
            None,
        );
        check(
            "runAsUser 0",
            pod(Some(true), Some(0)),
            image(Some(1000), ""),
            Some("container's runAsUser breaks non-root policy"),
        );
        check(
            "runAsNonRoot false",
            pod(Some(false), None),
            image(Some(0), ""),
            None,
        );
        check("runAsNonRoot unset", pod(None, None), image(None, ""), None);
    }

    #[test]
    fn the_pod_level_setting_applies_and_the_container_overrides_it() {
        let mut p = pod(None, None);
        p.spec.security_context = Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(0),
            ..Default::default()
        });
        assert!(!needs_image_user(&p, &p.spec.containers[0]));
        check(
            "pod-level runAsUser 0",
            p.clone(),
            image(Some(1000), ""),
            Some("container's runAsUser breaks"),
        );
        p.spec.containers[0].security_context = Some(SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        });
        check(
            "container runAsUser overrides",
            p.clone(),
            image(Some(0), ""),
            None,
        );
        p.spec.containers[0].security_context = Some(SecurityContext {
            run_as_non_root: Some(false),
            ..Default::default()
        });
        check(
            "container runAsNonRoot false overrides",
            p,
            image(Some(0), ""),
            None,
        );
        assert!(needs_image_user(
            &pod(Some(true), None),
            &pod(Some(true), None).spec.containers[0]
        ));
    }
}
