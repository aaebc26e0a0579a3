//! `berth token list | create --role R [--name N] | revoke ID`: the head's tokens (admin only).

use std::io::Write;

use berth_api::rest::{List, Role, TokenCreate, TokenCreated, TokenInfo};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{presets, Table};

use super::{api_path, json_text, write_out, HeadArgs, Output, OutputArgs, NO_BODY};

/// The flags of `berth token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
    #[command(flatten)]
    pub head: HeadArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// What to do with tokens.
#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// List the tokens (ID, name, role, creation); never a secret.
    List,
    /// Make a token; its secret is printed once and kept nowhere (the head stores a hash).
    Create {
        /// What it may do: admin (everything but the agent protocol), read (GETs and dry
        /// runs), agent (join as a machine and receive work).
        #[arg(long, value_enum)]
        role: RoleArg,
        /// A name to tell it apart in the list.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revoke a token by ID: every later call with it is refused.
    Revoke {
        /// The token's ID (`tok-3f2a9c1e`), from `berth token list`.
        #[arg(value_name = "ID")]
        id: String,
    },
}

/// A role on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Everything through the REST API and the dashboard.
    Admin,
    /// Reads only.
    Read,
    /// The agent protocol only.
    Agent,
}

impl From<RoleArg> for Role {
    fn from(role: RoleArg) -> Role {
        match role {
            RoleArg::Admin => Role::Admin,
            RoleArg::Read => Role::Read,
            RoleArg::Agent => Role::Agent,
        }
    }
}

fn role_word(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Read => "read",
        Role::Agent => "agent",
    }
}

fn table(tokens: &[TokenInfo]) -> String {
    let mut table = Table::new();
    table.load_style(presets::NOTHING).set_header(vec!["ID", "ROLE", "NAME", "CREATED"]);
    for t in tokens {
        let created = match t.created_at_ms {
            0 => "first start".to_string(),
            ms => berth_api::text::utc(ms / 1000, ' '),
        };
        let name = if t.name.is_empty() { "-" } else { t.name.as_str() };
        table.add_row(vec![t.id.as_str(), role_word(t.role), name, created.as_str()]);
    }
    format!("{table}\n")
}

/// Runs `berth token …`.
pub fn run(args: &TokenArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = args.head.client()?;
    let json = args.output.output == Output::Json;
    let text = match &args.action {
        TokenAction::List => {
            let list: List<TokenInfo> = client.get(&api_path(&["tokens"]))?;
            if json {
                json_text(&list)?
            } else {
                table(&list.items)
            }
        }
        TokenAction::Create { role, name } => {
            let body = TokenCreate { role: (*role).into(), name: name.clone() };
            let made: TokenCreated = client.post(&api_path(&["tokens"]), Some(&body))?;
            if json {
                json_text(&made)?
            } else {
                format!(
                    "{} ({} token) created; its secret, shown only now:\n{}\n",
                    made.token.id,
                    role_word(made.token.role),
                    made.secret
                )
            }
        }
        TokenAction::Revoke { id } => {
            let revoked: TokenInfo = client.delete(&api_path(&["tokens", id]), NO_BODY)?;
            if json {
                json_text(&revoked)?
            } else {
                format!("{} revoked: calls with it are refused from now on\n", revoked.id)
            }
        }
    };
    write_out(out, &text)
}
