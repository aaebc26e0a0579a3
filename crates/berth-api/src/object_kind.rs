//! The kinds of object a user creates and names by ID (`actor-12`, `task-3`, `pg-7`, `job-2`): one
//! definition for the head, the CLI and every client.

/// Which kind of object an ID names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    /// `actor-<n>`.
    Actor,
    /// `task-<n>`.
    Task,
    /// `pg-<n>`.
    Group,
    /// `job-<n>`.
    Job,
}

impl ObjectKind {
    /// Every kind, in the order of [`ObjectKind::index`].
    pub const ALL: [ObjectKind; 4] =
        [ObjectKind::Actor, ObjectKind::Task, ObjectKind::Group, ObjectKind::Job];

    /// The ID prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            ObjectKind::Actor => "actor-",
            ObjectKind::Task => "task-",
            ObjectKind::Group => "pg-",
            ObjectKind::Job => "job-",
        }
    }

    /// The word used in answers and paths' parameters: `actor`, `task`, `placement_group`, `job`.
    pub fn word(self) -> &'static str {
        match self {
            ObjectKind::Actor => "actor",
            ObjectKind::Task => "task",
            ObjectKind::Group => "placement_group",
            ObjectKind::Job => "job",
        }
    }

    /// The kind in words, for people: `actor`, `task`, `placement group`.
    pub fn noun(self) -> &'static str {
        match self {
            ObjectKind::Actor => "actor",
            ObjectKind::Task => "task",
            ObjectKind::Group => "placement group",
            ObjectKind::Job => "job",
        }
    }

    /// The collection in the REST API's paths: `actors`, `tasks`, `placement_groups`.
    pub fn collection(self) -> &'static str {
        match self {
            ObjectKind::Actor => "actors",
            ObjectKind::Task => "tasks",
            ObjectKind::Group => "placement_groups",
            ObjectKind::Job => "jobs",
        }
    }

    /// Its position in per-kind arrays (actors, tasks, groups, jobs).
    pub fn index(self) -> usize {
        match self {
            ObjectKind::Actor => 0,
            ObjectKind::Task => 1,
            ObjectKind::Group => 2,
            ObjectKind::Job => 3,
        }
    }

    /// The ID of the `seq`th object of this kind.
    pub fn id(self, seq: u64) -> String {
        format!("{}{seq}", self.prefix())
    }

    /// The kind and sequence number of an ID, if it has the exact shape of one (no sign, no
    /// leading zeros: one spelling per ID).
    pub fn parse(id: &str) -> Option<(ObjectKind, u64)> {
        ObjectKind::ALL.into_iter().find_map(|kind| {
            let digits = id.strip_prefix(kind.prefix())?;
            if digits.is_empty()
                || digits.starts_with('0')
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            digits.parse().ok().map(|seq| (kind, seq))
        })
    }

    /// The kind an ID names by its prefix alone (`actor-…`, with something after the dash): a
    /// client's guess of where to ask, leaving the ID's own check to the head.
    pub fn of_prefix(id: &str) -> Option<ObjectKind> {
        let (prefix, rest) = id.split_once('-')?;
        if rest.is_empty() {
            return None;
        }
        ObjectKind::ALL.into_iter().find(|kind| kind.prefix().trim_end_matches('-') == prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_made_and_read_back_in_one_spelling() {
        for kind in ObjectKind::ALL {
            assert_eq!(ObjectKind::parse(&kind.id(12)), Some((kind, 12)));
            assert_eq!(ObjectKind::of_prefix(&kind.id(12)), Some(kind));
        }
        for id in ["actor-012", "actor-+1", "actor-", "task-1x", "node-1", "pg-", ""] {
            assert_eq!(ObjectKind::parse(id), None, "{id}");
        }
        assert_eq!(ObjectKind::of_prefix("actor-x"), Some(ObjectKind::Actor));
        for id in ["node-1", "actor-", "actor", "12", ""] {
            assert_eq!(ObjectKind::of_prefix(id), None, "{id}");
        }
    }
}
