//! Field and label selectors as the API server parses them, for the subset litelet
//! and the tests use: `k=v`, `k==v`, `k!=v` (fields and labels), `k` and `!k`
//! (labels). Fields the real server would not accept for a kind are refused.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    Absent(String),
}

/// A parsed `fieldSelector` + `labelSelector` pair.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    fields: Vec<Req>,
    labels: Vec<Req>,
}

fn parse_terms(s: &str, labels: bool) -> Result<Vec<Req>, String> {
    let mut out = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let req = if let Some((k, v)) = term.split_once("!=") {
            Req::Ne(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = term.split_once("==") {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if let Some((k, v)) = term.split_once('=') {
            Req::Eq(k.trim().into(), v.trim().into())
        } else if labels && term.contains(' ') {
            return Err(format!("unsupported selector {term:?}"));
        } else if labels {
            match term.strip_prefix('!') {
                Some(k) => Req::Absent(k.trim().into()),
                None => Req::Exists(term.into()),
            }
        } else {
            return Err(format!("invalid field selector: {term:?}"));
        };
        out.push(req);
    }
    Ok(out)
}

/// Fields the real server supports in field selectors, per resource.
fn field_supported(resource: &str, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match resource {
        "pods" => matches!(
            field,
            "spec.nodeName"
                | "spec.restartPolicy"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        "nodes" => field == "spec.unschedulable",
        "events" => {
            field.starts_with("involvedObject.") || matches!(field, "reason" | "type" | "source")
        }
        "secrets" => field == "type",
        _ => false,
    }
}

impl Selector {
    /// Parses the two query parameters for objects of `resource`.
    pub fn parse(resource: &str, field: Option<&str>, label: Option<&str>) -> Result<Self, String> {
        let fields = parse_terms(field.unwrap_or(""), false)?;
        for f in &fields {
            let (Req::Eq(k, _) | Req::Ne(k, _) | Req::Exists(k) | Req::Absent(k)) = f;
            if !field_supported(resource, k) {
                return Err(format!("field label not supported: {k}"));
            }
        }
        let labels = parse_terms(label.unwrap_or(""), true)?;
        Ok(Self { fields, labels })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let field_value = |k: &str| -> String {
            let ptr = format!("/{}", k.replace('.', "/"));
            match obj.pointer(&ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            }
        };
        let fields_ok = self.fields.iter().all(|r| match r {
            Req::Eq(k, v) => field_value(k) == *v,
            Req::Ne(k, v) => field_value(k) != *v,
            Req::Exists(_) | Req::Absent(_) => true,
        });
        let labels = obj.pointer("/metadata/labels");
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|r| match r {
            Req::Eq(k, v) => label(k) == Some(v.as_str()),
            Req::Ne(k, v) => label(k) != Some(v.as_str()),
            Req::Exists(k) => label(k).is_some(),
            Req::Absent(k) => label(k).is_none(),
        });
        fields_ok && labels_ok
    }
}
