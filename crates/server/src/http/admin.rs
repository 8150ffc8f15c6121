//! The admin API (`--admin-key`): list, load and unload models while the process serves. A load answers at
//! once and runs in the background; the model serves once loaded and warm. An unload takes the model out of
//! routing, lets its in-flight requests finish (up to `--drain-timeout`), stops its workers and frees it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aleph_engine::{LoadRefused, Memory, ModelEntry, ModelState};
use aleph_models::hub;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use super::extract::ApiJson;
use super::state::AppState;
use crate::cli::ModelOptions;
use crate::memory;

/// One model as the admin API lists it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AdminModel {
    /// The served name.
    pub name: String,
    pub model_id: String,
    /// `loading`, `ready`, `draining`, `failed`, or `removed` (the answer to an unload).
    pub state: &'static str,
    /// Why the load failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes of weights held, once loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_bytes: Option<u64>,
    /// Bytes counted against the memory budget per device: what the weights hold once loaded, the least they
    /// can take while loading.
    #[serde(skip_serializing_if = "Memory::is_empty")]
    pub memory: Memory,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AdminModelList {
    pub object: &'static str,
    pub data: Vec<AdminModel>,
}

fn describe(e: &ModelEntry) -> AdminModel {
    AdminModel {
        name: e.name.clone(),
        model_id: e.model_id.clone(),
        state: e.state.name(),
        reason: match &e.state {
            ModelState::Failed(why) => Some(why.clone()),
            _ => None,
        },
        weight_bytes: e.handle.as_ref().map(|h| h.info().weight_bytes),
        memory: e.memory.clone(),
    }
}

/// Every model with its state.
#[utoipa::path(get, path = "/admin/models", tag = "admin",
    responses((status = 200, body = AdminModelList), (status = 401, body = super::error::ErrorBody)))]
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<AdminModelList>, ApiError> {
    let data = state.registry()?.entries().iter().map(describe).collect();
    Ok(Json(AdminModelList { object: "list", data }))
}

/// Load a model, with the per-model options of `aleph v2`. Answers 202 at once; `GET /admin/models` shows
/// the load's progress, and the model serves once it is ready.
#[utoipa::path(post, path = "/admin/models", tag = "admin", request_body = ModelOptions,
    responses(
        (status = 202, description = "Loading in the background", body = AdminModel),
        (status = 409, description = "A model of that name is loading, served or being removed, or its weights would pass the memory budget", body = super::error::ErrorBody),
        (status = 422, description = "Invalid options", body = super::error::ErrorBody),
    ))]
pub async fn load(
    State(state): State<Arc<AppState>>,
    ApiJson(options): ApiJson<ModelOptions>,
) -> Result<(StatusCode, Json<AdminModel>), ApiError> {
    let admin = state.admin.as_ref().ok_or_else(|| ApiError::not_found("the admin API is off"))?;
    let spec = admin.args.spec_for(&options).map_err(|e| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let registry = state.registry()?.clone();
    let name = spec.served_name.clone();
    // A model whose files are here is held to the budget now; one still to download, once it is here.
    // Off the async threads: the lookup touches the file system, the estimate reads the checkpoint's headers.
    let expected = {
        let spec = spec.clone();
        tokio::task::spawn_blocking(move || match hub::resolve_local(&spec.model_id, spec.revision.as_deref()) {
            Some(dir) => memory::expected(&spec, Some(&dir)),
            None => Memory::new(),
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the checkpoint: {e}")))?
    };
    registry.begin_load(&name, &spec.model_id, expected.clone()).map_err(|refused| match refused {
        LoadRefused::Busy(held) => {
            ApiError::new(StatusCode::CONFLICT, format!("model `{name}` is already {}", held.name()))
                .with_param("served_model_name")
        }
        LoadRefused::OverBudget(why) => ApiError::new(StatusCode::CONFLICT, why).with_param("model_id"),
    })?;
    let answer = AdminModel {
        name: name.clone(),
        model_id: spec.model_id.clone(),
        state: "loading",
        reason: None,
        weight_bytes: None,
        memory: expected,
    };
    let loader = admin.loader.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let in_registry = registry.clone();
        let loaded = tokio::task::spawn_blocking(move || loader.load_into(&in_registry, &spec)).await;
        match loaded {
            Ok(Ok(())) => tracing::info!(model = name, "admin: ready in {:.2} s", started.elapsed().as_secs_f64()),
            Ok(Err(why)) => tracing::warn!(model = name, "admin: load failed: {why:#}"),
            Err(e) => {
                tracing::warn!(model = name, "admin: the load stopped: {e}");
                let _ = registry.finish_load(&name, Err(format!("the load stopped: {e}")));
            }
        }
    });
    Ok((StatusCode::ACCEPTED, Json(answer)))
}

/// Unload a model: it stops taking requests at once, its in-flight requests finish (up to
/// `--drain-timeout`), then its workers stop and its memory is freed. Answers once it is gone. A failed
/// load's entry is simply forgotten.
#[utoipa::path(delete, path = "/admin/models/{model}", tag = "admin",
    params(("model" = String, Path, description = "The served model name")),
    responses(
        (status = 200, description = "Removed", body = AdminModel),
        (status = 404, description = "No such model", body = super::error::ErrorBody),
        (status = 409, description = "Still loading, or already being removed", body = super::error::ErrorBody),
    ))]
pub async fn unload(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Json<AdminModel>, ApiError> {
    let admin = state.admin.as_ref().ok_or_else(|| ApiError::not_found("the admin API is off"))?;
    let registry = state.registry()?.clone();
    let name = name.trim_start_matches('/').to_string();
    let entry = registry.begin_drain(&name).map_err(|held| match held {
        None => ApiError::not_found(format!("no model `{name}` is listed")).with_param("model"),
        Some(held) => ApiError::new(StatusCode::CONFLICT, format!("model `{name}` is {}", held.name())),
    })?;
    if let Some(handle) = entry.handle {
        // Each in-flight request holds the handle; besides them, only the registry's entry and this one do.
        let deadline = Instant::now() + Duration::from_secs_f64(admin.args.drain_timeout.max(0.0));
        while Arc::strong_count(&handle) > 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        registry.remove(&name);
        // The workers own the weights: joining them frees those, dropping the handle the rest.
        tokio::task::spawn_blocking(move || {
            handle.shutdown();
            drop(handle);
            release_freed_memory();
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("stopping `{name}`: {e}")))?;
        tracing::info!(model = name, "admin: removed");
    }
    Ok(Json(AdminModel {
        name,
        model_id: entry.model_id,
        state: "removed",
        reason: None,
        weight_bytes: None,
        memory: Memory::new(),
    }))
}

/// glibc keeps freed memory in its arenas for reuse, so a model's weights freed by an unload would stay
/// resident; hand the free pages back to the OS.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only returns free pages of the allocator's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
