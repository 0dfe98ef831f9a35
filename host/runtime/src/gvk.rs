//! Resource types between the WIT bindings and the policy vocabulary's [`Gvk`].

pub(crate) use kubeplug_policy::Gvk;

impl From<crate::bindings::wit::Gvk> for Gvk {
    fn from(g: crate::bindings::wit::Gvk) -> Self {
        Self {
            group: g.group,
            version: g.version,
            kind: g.kind,
        }
    }
}

impl From<&Gvk> for crate::bindings::wit::Gvk {
    fn from(g: &Gvk) -> Self {
        Self {
            group: g.group.clone(),
            version: g.version.clone(),
            kind: g.kind.clone(),
        }
    }
}
