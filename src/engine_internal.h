/*
 * engine_internal.h - what library modules beside engine.c (the disk KV
 * store) need of the public objects: the model and session behind them.
 * Not part of the public API.
 */
#ifndef MS_ENGINE_INTERNAL_H
#define MS_ENGINE_INTERNAL_H

#include "model/model.h"
#include "model/session.h"
#include "moestream.h"

const struct dsv4_model *ms_engine_model(const struct ms_engine *e);
struct dsv4_session *ms_session_impl(struct ms_session *s);
const struct dsv4_session *ms_session_impl_const(const struct ms_session *s);
struct ms_engine *ms_session_engine(const struct ms_session *s);

#endif
