-- title: sessionless points per user (now in views.sql)
-- description: superseded: the views this migration once created live in queries/schema/views.sql
--   (re-applied by Store whenever they change). Kept so warehouses that recorded this version
--   still open.
SELECT 1;
